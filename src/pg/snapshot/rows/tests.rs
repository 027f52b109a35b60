use super::*;
use proptest::prelude::*;

fn text(s: &[u8]) -> Cell {
    Cell::Text(Bytes::copy_from_slice(s))
}

fn parse(s: &[u8]) -> Result<Vec<Cell>, String> {
    parse_copy_line(&Bytes::copy_from_slice(s))
}

/// COPY text format as the server writes it, with `style` choosing for
/// each byte how to write it when several spellings decode the same.
fn encode(cells: &[Cell], style: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut k = 0usize;
    for (i, cell) in cells.iter().enumerate() {
        if i > 0 {
            out.push(b'\t');
        }
        let Some(bytes) = cell.bytes() else {
            out.extend_from_slice(b"\\N");
            continue;
        };
        for &b in bytes.iter() {
            let s = style.get(k % style.len().max(1)).copied().unwrap_or(0) % 4;
            k += 1;
            match (b, s) {
                (b'\\', _) => out.extend_from_slice(b"\\\\"),
                (b'\t', _) => out.extend_from_slice(b"\\t"),
                (b'\n', _) => out.extend_from_slice(b"\\n"),
                (b'\r', _) => out.extend_from_slice(b"\\r"),
                (0x08, _) => out.extend_from_slice(b"\\b"),
                (0x0c, _) => out.extend_from_slice(b"\\f"),
                (0x0b, _) => out.extend_from_slice(b"\\v"),
                (_, 1) => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
                (_, 2) => out.extend_from_slice(format!("\\x{b:02X}").as_bytes()),
                _ => out.push(b),
            }
        }
    }
    out
}

#[test]
fn splits_fields_and_nulls() {
    assert_eq!(
        parse(b"1\t\\N\tabc\t").unwrap(),
        vec![text(b"1"), Cell::Null, text(b"abc"), text(b"")]
    );
    assert_eq!(parse(b"").unwrap(), vec![text(b"")]);
    // `\\N` is a backslash and an N, not NULL.
    assert_eq!(parse(b"\\\\N").unwrap(), vec![text(b"\\N")]);
}

#[test]
fn decodes_every_escape() {
    assert_eq!(
        parse(b"a\\tb\\nc\\rd\\\\e\\bf\\fg\\vh").unwrap(),
        vec![text(b"a\tb\nc\rd\\e\x08f\x0cg\x0bh")]
    );
    assert_eq!(parse(b"\\101\\7\\0101").unwrap(), vec![text(b"A\x07\x081")]);
    assert_eq!(
        parse(b"\\x41\\x4a\\xfZ\\xZ").unwrap(),
        vec![text(b"AJ\x0fZxZ")]
    );
    // Octal values above 0o377 keep the low byte, as COPY FROM does.
    assert_eq!(parse(b"\\777").unwrap(), vec![text(b"\xff")]);
    assert_eq!(parse(b"\\q\\.").unwrap(), vec![text(b"q.")]);
}

#[test]
fn backslash_at_field_end_is_an_error_not_a_panic() {
    assert!(parse(b"abc\\").is_err());
    assert!(parse(b"a\\\tb").is_err());
    assert!(parse(b"\\").is_err());
}

#[test]
fn unescaped_fields_are_slices_of_the_line() {
    let line = Bytes::from_static(b"abc\tdef");
    let cells = parse_copy_line(&line).unwrap();
    let Cell::Text(b) = &cells[1] else {
        panic!("{cells:?}")
    };
    assert_eq!(b.as_ptr(), line[4..].as_ptr());
}

#[test]
fn lines_split_across_and_within_chunks() {
    let mut lines = LineSplitter::default();
    assert_eq!(lines.next_line(), None);
    lines.push(Bytes::from_static(b"a\tb\nc"));
    assert_eq!(lines.next_line().as_deref(), Some(&b"a\tb"[..]));
    assert_eq!(lines.next_line(), None);
    assert!(lines.has_partial());
    lines.push(Bytes::from_static(b"d"));
    assert_eq!(lines.next_line(), None);
    lines.push(Bytes::from_static(b"e\n\nf\n"));
    assert_eq!(lines.next_line().as_deref(), Some(&b"cde"[..]));
    assert_eq!(lines.next_line().as_deref(), Some(&b""[..]));
    assert_eq!(lines.next_line().as_deref(), Some(&b"f"[..]));
    assert_eq!(lines.next_line(), None);
    assert!(!lines.has_partial());
}

proptest! {
    #[test]
    fn any_chunking_yields_the_same_lines(
        lines in prop::collection::vec(prop::collection::vec(
            any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..30), 0..20),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let mut stream = Vec::new();
        for line in &lines {
            stream.extend_from_slice(line);
            stream.push(b'\n');
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        cuts.push(0);
        cuts.push(stream.len());
        cuts.sort_unstable();
        let mut splitter = LineSplitter::default();
        let mut got = Vec::new();
        for w in cuts.windows(2) {
            splitter.push(Bytes::copy_from_slice(&stream[w[0]..w[1]]));
            while let Some(line) = splitter.next_line() {
                got.push(line.to_vec());
            }
        }
        prop_assert!(!splitter.has_partial());
        prop_assert_eq!(got, lines);
    }

    #[test]
    fn round_trips_through_the_encoder(
        cells in prop::collection::vec(
            prop::option::of(prop::collection::vec(any::<u8>(), 0..40)), 1..8),
        style in prop::collection::vec(any::<u8>(), 1..16),
    ) {
        let cells: Vec<Cell> = cells
            .into_iter()
            .map(|c| c.map_or(Cell::Null, |b| Cell::Text(Bytes::from(b))))
            .collect();
        let line = encode(&cells, &style);
        prop_assert!(!line.contains(&b'\n'));
        prop_assert_eq!(parse(&line).unwrap(), cells);
    }

    #[test]
    fn never_panics(line in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse(&line);
    }
}
