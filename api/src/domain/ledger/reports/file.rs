//! A report's file as it is written: rows formatted as CSV (RFC 4180, a header line first)
//! or JSON Lines, stored in pieces of `CHUNK` bytes as they fill, so a report of any size
//! holds one piece in memory; its SHA-256 and size are counted on the way.
use sea_orm::DbErr;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::store;

/// Bytes per stored piece.
pub const CHUNK: usize = 64 * 1024;

/// The formats' names, as requests give them.
pub const FORMATS: &[&str] = &["csv", "jsonl"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Csv,
    Jsonl,
}

impl Format {
    pub const ALL: [Format; 2] = [Format::Csv, Format::Jsonl];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Jsonl => "jsonl",
        }
    }

    pub fn parse(s: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.as_str() == s)
    }

    /// The file's media type.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Csv => "text/csv; charset=utf-8",
            Format::Jsonl => "application/jsonl",
        }
    }
}

/// One value of a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell {
    Text(String),
    Int(i64),
}

/// What a finished file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub rows: i64,
    pub bytes: i64,
    pub sha256: String,
}

pub struct FileWriter<'a> {
    db: &'a store::Db,
    report_id: Uuid,
    format: Format,
    columns: &'static [&'static str],
    buf: Vec<u8>,
    seq: i32,
    hasher: Sha256,
    rows: i64,
    bytes: i64,
}

impl<'a> FileWriter<'a> {
    /// A file of `columns` (the CSV header names them in this order).
    pub fn new(
        db: &'a store::Db,
        report_id: Uuid,
        format: Format,
        columns: &'static [&'static str],
    ) -> Self {
        let mut w = FileWriter {
            db,
            report_id,
            format,
            columns,
            buf: Vec::with_capacity(CHUNK),
            seq: 0,
            hasher: Sha256::new(),
            rows: 0,
            bytes: 0,
        };
        if format == Format::Csv {
            let header: Vec<String> = columns.iter().map(|c| csv_field(c)).collect();
            w.push_line(&header.join(","));
        }
        w
    }

    fn push_line(&mut self, line: &str) {
        self.buf.extend_from_slice(line.as_bytes());
        self.buf.extend_from_slice(if self.format == Format::Csv {
            b"\r\n"
        } else {
            b"\n"
        });
    }

    /// Appends one row (its cells in the columns' order); a full piece is stored.
    pub async fn row(&mut self, cells: &[Cell]) -> Result<(), DbErr> {
        debug_assert_eq!(cells.len(), self.columns.len());
        let line = match self.format {
            Format::Csv => cells
                .iter()
                .map(|c| match c {
                    Cell::Text(t) => csv_field(t),
                    Cell::Int(i) => i.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
            Format::Jsonl => {
                let members: Vec<String> = self
                    .columns
                    .iter()
                    .zip(cells)
                    .map(|(name, c)| {
                        let value = match c {
                            Cell::Text(t) => serde_json::Value::from(t.as_str()),
                            Cell::Int(i) => serde_json::Value::from(*i),
                        };
                        format!("{}:{value}", serde_json::Value::from(*name))
                    })
                    .collect();
                format!("{{{}}}", members.join(","))
            }
        };
        self.push_line(&line);
        self.rows += 1;
        if self.buf.len() >= CHUNK {
            self.store_piece().await?;
        }
        Ok(())
    }

    async fn store_piece(&mut self) -> Result<(), DbErr> {
        let piece = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.hasher.update(&piece);
        self.bytes += piece.len() as i64;
        // Each piece commits on its own: on SQLite the one writer is free between pieces.
        let txn = store::begin(self.db).await?;
        store::ledger::reports::insert_chunk(&txn, self.report_id, self.seq, piece).await?;
        txn.commit().await?;
        self.seq += 1;
        Ok(())
    }

    /// Stores what is left and says what the file holds.
    pub async fn finish(mut self) -> Result<Written, DbErr> {
        if !self.buf.is_empty() {
            self.store_piece().await?;
        }
        let digest = self.hasher.finalize();
        Ok(Written {
            rows: self.rows,
            bytes: self.bytes,
            sha256: crate::infra::crypto::hex(&digest),
        })
    }
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_that_need_it_are_quoted_with_their_quotes_doubled() {
        assert_eq!(csv_field("EUR"), "EUR");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(Format::parse("jsonl"), Some(Format::Jsonl));
        assert_eq!(Format::parse("xlsx"), None);
        for f in Format::ALL {
            assert!(FORMATS.contains(&f.as_str()));
        }
    }
}
