//! CSV as RFC 4180 writes it: comma-separated, a cell quoted (with `""`
//! for a quote) when it holds a comma, a quote, a line break or leading or
//! trailing spaces; records end with `\n` (a `\r\n` is read too). Quoted
//! cells may span lines.

use std::io::{self, BufRead};

/// Longest line of input read (1 GiB): a row of hex of a value up to
/// 512 MiB. Past it, or at a NUL byte (binary input: `sheaf load <
/// /dev/zero` grew one line until memory ran out), reading stops with
/// an error instead.
pub const MAX_LINE: usize = 1 << 30;

/// Appends the next line of `input` (its `\n` included) to `text`, as
/// `BufRead::read_line`, but refuses lines past [`MAX_LINE`] and, unless
/// `nul_ok` (CSV: a string cell may hold a NUL character), binary input.
/// Returns the bytes read (0 at the end).
pub fn read_text_line<R: BufRead>(
    input: &mut R,
    text: &mut String,
    nul_ok: bool,
) -> io::Result<usize> {
    let mut line = Vec::new();
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let end = buf.iter().position(|&b| b == b'\n').map(|i| i + 1);
        let take = &buf[..end.unwrap_or(buf.len())];
        if !nul_ok && take.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a NUL byte: the input is binary, not text",
            ));
        }
        if line.len() + take.len() > MAX_LINE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a line longer than {} MiB", MAX_LINE >> 20),
            ));
        }
        line.extend_from_slice(take);
        let n = take.len();
        input.consume(n);
        if end.is_some() {
            break;
        }
    }
    let n = line.len();
    let line = String::from_utf8(line)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "the line is not UTF-8"))?;
    if text.is_empty() {
        *text = line; // the usual case: no second copy
    } else {
        text.push_str(&line); // a quoted CSV cell going on
    }
    Ok(n)
}

/// One record as a line of CSV, `\n` included.
pub fn line(cells: &[&str]) -> String {
    let mut out = String::new();
    for (i, cell) in cells.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let quote =
            cell.contains([',', '"', '\n', '\r']) || cell.starts_with(' ') || cell.ends_with(' ');
        if quote {
            out.push('"');
            out.push_str(&cell.replace('"', "\"\""));
            out.push('"');
        } else {
            out.push_str(cell);
        }
    }
    out.push('\n');
    out
}

/// Reads CSV records from a buffered reader.
pub struct Reader<R> {
    input: R,
    /// Line number where the next record starts (1-based).
    line: u64,
}

/// A record: its cells and the line it starts on.
pub struct Record {
    pub cells: Vec<String>,
    pub line: u64,
}

impl<R: BufRead> Reader<R> {
    pub fn new(input: R) -> Self {
        Reader { input, line: 1 }
    }

    /// The next record; `None` at the end of the input. Empty lines are
    /// skipped.
    pub fn next_record(&mut self) -> Option<Result<Record, String>> {
        loop {
            let start = self.line;
            let mut text = String::new();
            match read_text_line(&mut self.input, &mut text, true) {
                Ok(0) => return None,
                Ok(_) => self.line += 1,
                Err(e) => return Some(Err(format!("line {start}: {e}"))),
            }
            if text.trim_end_matches(['\r', '\n']).is_empty() {
                continue;
            }
            return Some(self.parse(text, start));
        }
    }

    /// Splits `text` (read from line `start`) into cells, reading more
    /// lines while a quoted cell is open.
    fn parse(&mut self, mut text: String, start: u64) -> Result<Record, String> {
        let mut cells = Vec::new();
        let mut cell = String::new();
        let mut pos = 0;
        let mut quoted = false;
        let mut was_quoted = false;
        loop {
            let Some(c) = text[pos..].chars().next() else {
                if quoted {
                    // The quoted cell goes on on the next line; the whole
                    // record is bounded like a line (an unclosed quote
                    // took the rest of the input into memory before).
                    if text.len() > MAX_LINE {
                        return Err(format!(
                            "line {start}: a record longer than {} MiB (a quoted cell never closed?)",
                            MAX_LINE >> 20
                        ));
                    }
                    let before = text.len();
                    match read_text_line(&mut self.input, &mut text, true) {
                        Ok(0) => {
                            return Err(format!("line {start}: a quoted cell is never closed"))
                        }
                        Ok(_) => self.line += 1,
                        Err(e) => return Err(format!("line {}: {e}", self.line)),
                    }
                    pos = before;
                    continue;
                }
                break;
            };
            pos += c.len_utf8();
            match (quoted, c) {
                (true, '"') => {
                    if text[pos..].starts_with('"') {
                        cell.push('"');
                        pos += 1;
                    } else {
                        quoted = false;
                    }
                }
                (true, c) => cell.push(c),
                (false, '"') if cell.is_empty() && !was_quoted => {
                    quoted = true;
                    was_quoted = true;
                }
                (false, ',') => {
                    cells.push(std::mem::take(&mut cell));
                    was_quoted = false;
                }
                (false, '\n') => break,
                (false, '\r') if text[pos..].starts_with('\n') || pos == text.len() => {}
                (false, c) if was_quoted => {
                    return Err(format!(
                        "line {start}: {c:?} after the closing quote of a cell"
                    ))
                }
                (false, c) => cell.push(c),
            }
        }
        cells.push(cell);
        Ok(Record { cells, line: start })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &str) -> Vec<Vec<String>> {
        let mut r = Reader::new(text.as_bytes());
        let mut out = Vec::new();
        while let Some(rec) = r.next_record() {
            out.push(rec.unwrap().cells);
        }
        out
    }

    #[test]
    fn cells_round_trip() {
        let cells = [
            "plain",
            "a,b",
            "say \"hi\"",
            "two\nlines",
            " padded ",
            "",
            "é",
        ];
        let text = line(&cells) + &line(&["x", "y"]);
        assert_eq!(
            read_all(&text),
            vec![
                cells.map(String::from).to_vec(),
                vec!["x".into(), "y".into()]
            ]
        );
    }

    #[test]
    fn crlf_and_blank_lines() {
        assert_eq!(
            read_all("a,b\r\n\r\nc,\"d\"\r\n"),
            vec![
                vec!["a".to_string(), "b".into()],
                vec!["c".into(), "d".into()]
            ]
        );
    }

    #[test]
    fn errors_name_the_line() {
        let mut r = Reader::new("k,v\n\"open,x\n".as_bytes());
        assert!(r.next_record().unwrap().is_ok());
        let e = r.next_record().unwrap().err().unwrap();
        assert!(e.starts_with("line 2:"), "{e}");
        let mut r = Reader::new("\"a\"b,c\n".as_bytes());
        assert!(r.next_record().unwrap().is_err());
    }
}
