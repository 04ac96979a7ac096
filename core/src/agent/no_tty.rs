//! What a cell sees instead of a terminal: stdin at EOF (`/dev/null`, set
//! where the cell's main process or interpreter is started) and an
//! environment that keeps pagers from waiting for keys no one will press.
//! Both the shell cell's spawn and the Python bootstrap take the defaults
//! from here.

/// Variables every cell gets unless they are already set (in the
/// environment the cell starts with; a cell's own `export` wins later).
/// Pagers print through `cat`; editors (`git commit` without `-m`,
/// `crontab -e`) are `false`, so the command fails at once and says so
/// (`There was a problem with the editor 'false'`) instead of a vi
/// drawing a screen into the cell's output and waiting for keys.
pub const ENV_DEFAULTS: &[(&str, &str)] = &[
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("EDITOR", "false"),
    ("VISUAL", "false"),
];

/// The defaults that `is_set` says are missing, in order.
pub fn missing_defaults(is_set: impl Fn(&str) -> bool) -> Vec<(&'static str, &'static str)> {
    ENV_DEFAULTS
        .iter()
        .copied()
        .filter(|(name, _)| !is_set(name))
        .collect()
}

/// Python that sets the defaults in the interpreter's environment (so the
/// cells' subprocesses inherit them) unless they are set.
pub fn python_prelude() -> String {
    ENV_DEFAULTS
        .iter()
        .map(|(name, value)| format!("os.environ.setdefault({name:?}, {value:?})\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_already_set_is_left_alone() {
        assert_eq!(
            missing_defaults(|name| name != "GIT_PAGER"),
            vec![("GIT_PAGER", "cat")]
        );
        assert_eq!(missing_defaults(|_| false).len(), ENV_DEFAULTS.len());
        assert!(python_prelude()
            .starts_with("os.environ.setdefault(\"PAGER\", \"cat\")\nos.environ.setdefault(\"GIT_PAGER\", \"cat\")\n"));
    }
}
