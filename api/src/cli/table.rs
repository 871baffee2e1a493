//! A plain-text table for a terminal: one header row, columns as wide as their widest
//! cell, long cells cut with an ellipsis. No colour: the output may go to a file.

/// Cells longer than this are cut.
const MAX_CELL: usize = 60;

pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    layout(headers, rows, MAX_CELL)
}

fn layout(headers: &[&str], rows: &[Vec<String>], max_cell: usize) -> String {
    let cut = |s: &str| -> String {
        let one_line: String = s
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if one_line.chars().count() > max_cell {
            let mut t: String = one_line.chars().take(max_cell - 1).collect();
            t.push('…');
            t
        } else {
            one_line
        }
    };
    let cells: Vec<Vec<String>> = std::iter::once(headers.iter().map(|h| h.to_string()).collect())
        .chain(rows.iter().map(|r| r.iter().map(|c| cut(c)).collect()))
        .collect();
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| {
            cells
                .iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &cells {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.pop();
    out
}

/// An object's fields as a two-column table, nothing cut (a key shown once must be whole);
/// lists and objects inside are shown as JSON (an empty list as `none`).
pub fn facts(v: &serde_json::Value) -> String {
    use serde_json::Value;
    let rows: Vec<Vec<String>> = v
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let shown = match v {
                Value::String(s) => s.clone(),
                Value::Null => "-".into(),
                Value::Array(a) if a.is_empty() => "none".into(),
                other => other.to_string(),
            };
            vec![k.clone(), shown]
        })
        .collect();
    layout(&["FIELD", "VALUE"], &rows, usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_and_long_cells_are_cut() {
        let long = "x".repeat(80);
        let t = render(
            &["ID", "ERROR"],
            &[
                vec!["a".into(), "short".into()],
                vec!["bbbb".into(), long.clone()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "ID    ERROR");
        assert_eq!(lines[1], "a     short");
        assert!(lines[2].starts_with("bbbb  xxx"));
        assert!(lines[2].ends_with('…'));
        assert_eq!(lines[2].chars().count(), 6 + 60);
    }

    #[test]
    fn a_newline_in_a_cell_does_not_break_the_row() {
        let t = render(&["A"], &[vec!["one\ntwo".into()]]);
        assert_eq!(t, "A\none two");
    }
}
