//! Colour on a terminal, none with NO_COLOR or when the stream is not a terminal.

use crate::model::Action;

/// Colour on a terminal, none with NO_COLOR or when not a terminal.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub color: bool,
}

impl Style {
    pub fn detect(stream_is_tty: bool) -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style { color: stream_is_tty && !no_color }
    }
    fn paint(&self, code: &str, s: &str) -> String {
        if self.color { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_string() }
    }
    pub fn green(&self, s: &str) -> String {
        self.paint("32", s)
    }
    pub fn yellow(&self, s: &str) -> String {
        self.paint("33", s)
    }
    pub fn red(&self, s: &str) -> String {
        self.paint("31", s)
    }
    pub fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }
    pub fn action(&self, a: Action) -> String {
        match a {
            Action::Create => self.green(a.symbol()),
            Action::Update | Action::Adopt => self.yellow(a.symbol()),
            Action::Replace => self.yellow(a.symbol()),
            Action::Delete => self.red(a.symbol()),
        }
    }
}
