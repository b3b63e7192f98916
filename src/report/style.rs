//! Colour on a terminal, none with NO_COLOR or when the stream is not a terminal.

use crate::model::Action;
use crate::settings::Terminal;

/// Colour on a terminal, none with NO_COLOR or when not a terminal.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub color: bool,
}

impl Style {
    /// Colour on a stream that is a terminal, unless NO_COLOR (`Terminal::no_color`).
    pub fn detect(stream_is_tty: bool, no_color: bool) -> Style {
        Style { color: stream_is_tty && !no_color }
    }

    /// stdout's style.
    pub fn stdout(t: &Terminal) -> Style {
        Style::detect(t.stdout, t.no_color)
    }

    /// stderr's style.
    pub fn stderr(t: &Terminal) -> Style {
        Style::detect(t.stderr, t.no_color)
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
