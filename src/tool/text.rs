//! Text from a model or a server shown back in messages: cut to a bound, names quoted.

use serde_json::Value;

/// Cuts `s` to at most `max` bytes on a char boundary, marking the cut with `…`.
pub(crate) fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// A name in double quotes, JSON-escaped (tool names from a model are untrusted text).
pub(crate) fn quote(name: &str) -> String {
    cut(Value::from(name).to_string(), 100)
}
