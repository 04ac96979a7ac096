//! Quoting for a POSIX shell, shared by every place that builds a command
//! line for `sh -c` (transports, rendered workloads).

/// Quotes `s` for a POSIX shell: `'…'`, with `'` as `'\''`. Any string
/// survives (newlines, `$`, backslashes, a leading `-`).
pub fn sh_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::sh_quote;

    #[test]
    fn quotes_wrap_and_single_quotes_are_spliced() {
        assert_eq!(sh_quote(""), "''");
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
        assert_eq!(sh_quote("$(x)\n-"), "'$(x)\n-'");
    }
}
