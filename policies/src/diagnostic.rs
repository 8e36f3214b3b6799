//! Problems found in a config file, each located at `FILE:LINE:COL`.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    /// 1-based line; 0 when the problem is not tied to a place (unreadable file).
    pub line: usize,
    /// 1-based column (in characters).
    pub col: usize,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file.display(),
            self.line.max(1),
            self.col.max(1),
            self.message
        )
    }
}

/// Every problem found in one file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// Turns byte offsets of one source text into `LINE:COL` diagnostics.
pub(crate) struct Locator<'a> {
    file: &'a Path,
    source: &'a str,
}

impl<'a> Locator<'a> {
    pub(crate) fn new(file: &'a Path, source: &'a str) -> Self {
        Self { file, source }
    }

    pub(crate) fn at(&self, span: Option<Range<usize>>, message: impl Into<String>) -> Diagnostic {
        let (line, col) = match span {
            Some(span) => line_col(self.source, span.start),
            None => (1, 1),
        };
        Diagnostic {
            file: self.file.to_path_buf(),
            line,
            col,
            message: message.into(),
        }
    }
}

/// 1-based line and character column of a byte offset.
fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = &source[..floor_char_boundary(source, offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based_and_count_characters() {
        let src = "a = 1\nbé = 2\n";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 6), (2, 1));
        // 'é' is two bytes; '=' after "bé " is the 4th character.
        assert_eq!(line_col(src, 10), (2, 4));
        assert_eq!(line_col(src, 999), (3, 1));
    }
}
