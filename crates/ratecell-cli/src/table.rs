//! Plain-text tables: columns sized to their widest cell, the first column
//! left-aligned (names), the others right-aligned (numbers).

use std::fmt::Write as _;

/// A table built row by row and rendered once.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    left: Vec<bool>,
    indent: usize,
}

impl Table {
    /// A table with these column headings.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        let header: Vec<String> = header.into_iter().map(Into::into).collect();
        let mut left = vec![false; header.len()];
        if let Some(first) = left.first_mut() {
            *first = true;
        }
        Table {
            header,
            rows: Vec::new(),
            left,
            indent: 2,
        }
    }

    /// Adds a row; missing cells are blank.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// The table as lines of text, each ending in a newline.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut width = vec![0; cols];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (w, cell) in width.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, row: &[String]| {
            let mut s = " ".repeat(self.indent);
            for (i, w) in width.iter().enumerate() {
                let cell = row.get(i).map(String::as_str).unwrap_or("");
                let pad = w - cell.chars().count();
                if i > 0 {
                    s.push_str("  ");
                }
                if self.left[i] {
                    s.push_str(cell);
                    s.push_str(&" ".repeat(pad));
                } else {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(cell);
                }
            }
            let _ = writeln!(out, "{}", s.trim_end());
        };
        line(&mut out, &self.header);
        for row in &self.rows {
            line(&mut out, row);
        }
        out
    }
}
