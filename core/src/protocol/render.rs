//! An op rendered for an exec call: argv plus stdin bytes. Pure, shared by
//! every transport, so the same bytes go over docker, ssh, Modal or a local
//! fork.

use super::install;
use super::ops::{Envelope, Lang, Op};
use super::PROTOCOL_VERSION;
use crate::bytes::Bytes;

/// Where the agent lives on the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentLocation {
    /// Absolute directory that holds `bin/` and `kernels/` (e.g. `/tmp/tether`).
    pub root: String,
    /// Hex SHA-256 of the agent binary the client ships.
    pub hash: String,
}

impl AgentLocation {
    /// The content-addressed path of the agent binary.
    pub fn agent_path(&self) -> String {
        let short = self.hash.get(..16).unwrap_or(&self.hash);
        format!("{}/bin/tether-agent-{short}", self.root)
    }
}

/// What stdin of the exec carries.
#[derive(Clone, PartialEq, Eq)]
pub enum StdinSource {
    /// These bytes.
    Bytes(Vec<u8>),
    /// The agent binary itself (the driver holds it; the core only names it).
    AgentBinary,
}

impl std::fmt::Debug for StdinSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StdinSource::Bytes(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            StdinSource::AgentBinary => f.write_str("<agent binary>"),
        }
    }
}

/// An exec call, ready for a transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// The command and its arguments (no shell unless argv says so).
    pub argv: Vec<String>,
    /// What to write to its stdin (then close it).
    pub stdin: StdinSource,
}

/// The install script: checks the architecture, copies stdin to a temporary
/// file, checks its size and renames it into place, then prints the reply.
/// `$1` root, `$2` hash, `$3` size, `$4` op id, `$5` final path. Its
/// refusals say what [`install::InstallRefusal`] says (the details are put in by
/// [`install_script`]), so a simulated install can answer the same.
const INSTALL_TEMPLATE: &str = r#"set -u
reply() { printf '{"v":1,"id":%s,%s}\n' "$4" "$1"; }
arch=$(uname -m 2>/dev/null || echo unknown)
if [ "$arch" != x86_64 ]; then
  cat >/dev/null
  printf '{"v":1,"id":%s,"error":{"kind":"wrong_arch","detail":"sandbox is %s; the agent is built for x86_64"}}\n' "$4" "$arch"
  exit 0
fi
id=$4
cannot() {
  cat >/dev/null
  printf '{"v":1,"id":%s,"error":{"kind":"cannot_install","detail":"%s"}}\n' "$id" "$1"
  exit 0
}
umask 077
mkdir -p "$1/bin" "$1/kernels" 2>/dev/null || cannot "@NO_DIRS@"
tmp="$1/bin/.install.$$"
cat > "$tmp" 2>/dev/null || { rm -f "$tmp"; cannot "@NO_WRITE@"; }
got=$(wc -c < "$tmp" | tr -d ' ')
if [ "$got" != "$3" ]; then
  rm -f "$tmp"
  printf '{"v":1,"id":%s,"error":{"kind":"bad_install","detail":"received %s of %s bytes"}}\n' "$4" "$got" "$3"
  exit 0
fi
chmod 755 "$tmp" && mv -f "$tmp" "$5" || exit 1
# A root on a noexec mount takes the file but cannot run it (126).
"$5" --version >/dev/null 2>&1
if [ $? -eq 126 ]; then
  printf '{"v":1,"id":%s,"error":{"kind":"cannot_install","detail":"@NOEXEC@"}}\n' "$4"
  exit 0
fi
printf '{"v":1,"id":%s,"reply":{"installed":{"path":"%s"}}}\n' "$4" "$5"
"#;

/// [`INSTALL_TEMPLATE`] with the details of [`install::InstallRefusal`] in it.
fn install_script() -> String {
    INSTALL_TEMPLATE
        .replace("@NO_DIRS@", install::NO_DIRS)
        .replace("@NO_WRITE@", install::NO_WRITE)
        .replace("@NOEXEC@", install::NOEXEC)
}

/// Renders `op` (with the id its reply must echo) for `location`.
pub fn render(id: u64, op: &Op, location: &AgentLocation) -> Rendered {
    match op {
        Op::Install { hash, size } => Rendered {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                install_script(),
                "tether-install".into(),
                location.root.clone(),
                hash.clone(),
                size.to_string(),
                id.to_string(),
                location.agent_path(),
            ],
            stdin: StdinSource::AgentBinary,
        },
        Op::Plain { lang, code } => Rendered {
            argv: plain_argv(*lang, code),
            stdin: StdinSource::Bytes(Vec::new()),
        },
        _ => {
            let envelope = Envelope {
                v: PROTOCOL_VERSION,
                id,
                op: op.clone(),
            };
            // Serialising plain data to a Vec cannot fail.
            let mut stdin = serde_json::to_vec(&envelope).unwrap_or_default();
            stdin.push(b'\n');
            Rendered {
                argv: vec![
                    location.agent_path(),
                    "op".into(),
                    "--root".into(),
                    location.root.clone(),
                ],
                stdin: StdinSource::Bytes(stdin),
            }
        }
    }
}

/// A cell's code as a plain command: Python under `python3 -c`, shell
/// under bash where the sandbox has it (as a kernel would), else `sh`.
fn plain_argv(lang: Lang, code: &Bytes) -> Vec<String> {
    match lang {
        Lang::Python => vec![
            "python3".into(),
            "-c".into(),
            String::from_utf8_lossy(code.as_slice()).into_owned(),
        ],
        // Line ends as a kernel's shell cell gets them.
        Lang::Shell => vec![
            "/bin/sh".into(),
            "-c".into(),
            "if command -v bash >/dev/null 2>&1; then exec bash -c \"$1\"; fi; exec sh -c \"$1\""
                .into(),
            "tether-plain".into(),
            String::from_utf8_lossy(&crate::agent::shell::cell_code(code.as_slice())).into_owned(),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::KernelName;
    use crate::protocol::InstallRefusal;

    #[test]
    fn the_install_script_says_what_the_typed_refusals_say() {
        let script = install_script();
        assert!(!script.contains('@'), "{script}");
        for r in [
            InstallRefusal::NoDirs,
            InstallRefusal::NoWrite,
            InstallRefusal::Noexec,
        ] {
            assert_eq!(r.kind(), crate::protocol::ErrorKind::CannotInstall);
            assert!(script.contains(&r.detail()), "{r:?}");
        }
        let arch = InstallRefusal::WrongArch { arch: "%s".into() }.detail();
        assert!(script.contains(&arch), "{arch}");
        let cut = InstallRefusal::Truncated { got: 1, want: 2 }.detail();
        assert!(script.contains(&cut.replace(['1', '2'], "%s")));
    }

    #[test]
    fn agent_ops_go_as_json_on_stdin() {
        let loc = AgentLocation {
            root: "/tmp/t".into(),
            hash: "ab".repeat(32),
        };
        let op = Op::Gc;
        let r = render(9, &op, &loc);
        assert_eq!(r.argv[0], "/tmp/t/bin/tether-agent-abababababababab");
        let StdinSource::Bytes(bytes) = r.stdin else {
            panic!("agent ops carry JSON")
        };
        let env: Envelope = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(env, Envelope { v: 1, id: 9, op });
        let probe = Op::Probe {
            kernel: KernelName::new("k").unwrap(),
            expect: None,
            sent: Vec::new(),
        };
        assert!(matches!(
            render(1, &probe, &loc).stdin,
            StdinSource::Bytes(_)
        ));
    }
}
