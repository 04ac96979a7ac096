//! `ps` output as rows, to count what survives a cancel.

/// One process, as `ps -eo pid=,ppid=,pgid=,sid=,stat=,args=` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proc {
    /// Process id.
    pub pid: u32,
    /// Parent.
    pub ppid: u32,
    /// Process group.
    pub pgid: u32,
    /// Session.
    pub sid: u32,
    /// State letters (`S`, `R`, `Z`…).
    pub stat: String,
    /// Command line.
    pub args: String,
}

impl Proc {
    /// A zombie: exited, not yet reaped; not running any more.
    pub fn is_zombie(&self) -> bool {
        self.stat.starts_with('Z')
    }
}

/// `roots` and every process below them in `table`.
pub fn trees_of(table: &[Proc], roots: &[u32]) -> std::collections::BTreeSet<u32> {
    let mut tree: std::collections::BTreeSet<u32> = roots.iter().copied().collect();
    loop {
        let before = tree.len();
        for p in table {
            if tree.contains(&p.ppid) {
                tree.insert(p.pid);
            }
        }
        if tree.len() == before {
            return tree;
        }
    }
}

/// The argv that lists every process.
pub const PS_ARGV: [&str; 3] = ["ps", "-eo", "pid=,ppid=,pgid=,sid=,stat=,args="];

/// Parses `ps` output; lines that are not rows are skipped.
pub fn parse_ps(text: &str) -> Vec<Proc> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.split_whitespace();
            let pid = it.next()?.parse().ok()?;
            let ppid = it.next()?.parse().ok()?;
            let pgid = it.next()?.parse().ok()?;
            let sid = it.next()?.parse().ok()?;
            let stat = it.next()?.to_owned();
            let args = it.collect::<Vec<_>>().join(" ");
            Some(Proc {
                pid,
                ppid,
                pgid,
                sid,
                stat,
                args,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_parse_and_junk_is_skipped() {
        let rows = parse_ps(
            "  1   0   1   1 Ss   /sbin/init -- x\nPID junk\n 42 1 42 42 Z [sleep] <defunct>\n",
        );
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].args, "/sbin/init -- x");
        assert!(rows[1].is_zombie());
    }

    #[test]
    fn a_tree_holds_its_root_and_every_descendant_whatever_the_order() {
        let rows = parse_ps(
            "  5   4   5   5 S  grandchild\n  4   2   4   4 S  child\n  2   1   2   2 S  root\n  9   1   9   9 S  other\n",
        );
        let tree: Vec<u32> = trees_of(&rows, &[2]).into_iter().collect();
        assert_eq!(tree, [2, 4, 5]);
    }
}
