use super::*;

#[test]
fn lossy_writer_swallows_a_broken_pipe() {
    use std::io::Write;
    struct Broken;
    impl io::Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
    }
    let mut w = Lossy(Broken);
    assert_eq!(w.write(b"a log line\n").unwrap(), 11);
    assert!(w.flush().is_ok());
    let mut ok = Lossy(Vec::new());
    write!(ok, "kept").unwrap();
    assert_eq!(ok.0, b"kept");
}

#[test]
fn log_filter_refuses_what_would_hide_the_logs() {
    for good in [
        None,
        Some(""),
        Some("  "),
        Some("debug"),
        Some("INFO"),
        Some("info,walrelay=debug"),
        Some("warn,walrelay::sink=trace"),
        Some("walrelay"),
        Some("off"),
    ] {
        assert!(log_filter(good).is_ok(), "{good:?}");
    }
    for bad in ["debg", "info,walrelay=verbose", "inof,walrelay=debug", "[{"] {
        let err = log_filter(Some(bad)).unwrap_err();
        assert!(err.starts_with("WALRELAY_LOG="), "{err}");
        assert!(err.contains(&format!("{bad:?}")), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}

#[test]
fn colours_only_on_a_terminal_without_no_color() {
    use std::ffi::OsStr;
    assert!(use_ansi(true, None));
    assert!(use_ansi(true, Some(OsStr::new(""))));
    assert!(!use_ansi(true, Some(OsStr::new("1"))));
    assert!(!use_ansi(false, None));
}
