use super::*;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn valid(parent: &str, state: Option<&str>) -> (Parsed, bool) {
    (
        Parsed::Valid(TraceContext {
            traceparent: Bytes::from(parent.to_owned()),
            tracestate: state.map(|s| Bytes::from(s.to_owned())),
        }),
        false,
    )
}

#[test]
fn a_bare_traceparent() {
    assert_eq!(parse(PARENT.as_bytes()), valid(PARENT, None));
    assert_eq!(
        parse(format!("  {PARENT}\n").as_bytes()),
        valid(PARENT, None)
    );
}

/// What Debezium's Quarkus outbox extension (OpenTelemetry's text map
/// propagator into `java.util.Properties.store`) writes.
#[test]
fn debeziums_properties_text() {
    let text = format!(
        "#Thu Dec 03 10:01:48 UTC 2026\ntraceparent={PARENT}\ntracestate=rojo\\=00f067aa0ba902b7,congo\\=t61rcWkgMzE\n"
    );
    assert_eq!(
        parse(text.as_bytes()),
        valid(PARENT, Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"))
    );
    let text = format!("#c\r\ntraceparent : {PARENT}\r\n");
    assert_eq!(parse(text.as_bytes()), valid(PARENT, None));
}

#[test]
fn nothing_is_absent_not_invalid() {
    assert_eq!(parse(b"").0, Parsed::Absent);
    assert_eq!(parse(b"  \n").0, Parsed::Absent);
    assert_eq!(parse(b"#Thu Dec 03 10:01:48 UTC 2026\n").0, Parsed::Absent);
}

#[test]
fn invalid_values() {
    for bad in [
        "garbage",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        "#c\nother=1\n",
    ] {
        assert_eq!(parse(bad.as_bytes()).0, Parsed::Invalid, "{bad}");
    }
    assert_eq!(parse(&[0xff, 0xfe]).0, Parsed::Invalid);
}

#[test]
fn a_later_version_may_append_fields() {
    let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds";
    assert_eq!(parse(later.as_bytes()), valid(later, None));
}

#[test]
fn an_invalid_tracestate_is_dropped_alone() {
    let text = format!("traceparent={PARENT}\ntracestate={}\n", "x".repeat(513));
    let (parsed, dropped) = parse(text.as_bytes());
    assert_eq!(parsed, valid(PARENT, None).0);
    assert!(dropped);
}
