//! Shortening bytes for one line of a trace or a report.

/// Shortens bytes for a trace line: at most `max` characters, control
/// characters escaped (so one entry stays one line).
pub fn excerpt(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
