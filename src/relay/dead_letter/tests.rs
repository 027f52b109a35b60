use super::*;
use crate::config::Config;
use crate::lsn::Lsn;

fn failure(key: Option<&'static [u8]>) -> Failure {
    Failure {
        reason: Reason::Unencodable,
        error: "not valid".into(),
        table: "public.t".into(),
        pos: Position {
            commit_lsn: Lsn(0x16_B374_D848),
            index: 7,
        },
        id: None,
        topic: Some("cdc.public.t".into()),
        key: key.map(Bytes::from_static),
        value: Some(Bytes::from_static(b"{}")),
        refused_bytes: None,
    }
}

#[test]
fn a_dead_letter_keeps_its_key_and_is_keyed_by_its_event_id_without_one() {
    let config = Config::from_str(
        "[connector]\nname = \"orders\"\n[postgres]\ndatabase = \"app\"\n[kafka]\n\
         brokers = \"127.0.0.1:9\"\n[[outbox]]\ntable = \"public.outbox\"\n\
         [dead_letter]\ntopic = \"dlq\"\n",
        "test.toml",
    )
    .unwrap();
    let dead = DeadLetter::new(&config).unwrap();
    let header = |r: &Record, name: &str| {
        r.headers
            .iter()
            .find(|(k, _)| &**k == name)
            .map(|(_, v)| v.clone())
    };

    let keyed = dead.record(&failure(Some(b"{\"id\":1}")));
    assert_eq!(keyed.key.as_deref(), Some(&b"{\"id\":1}"[..]));
    assert_eq!(header(&keyed, KEY_HEADER), keyed.key);

    let keyless = dead.record(&failure(None));
    let event_id = header(&keyless, EVENT_ID_HEADER).unwrap();
    assert_eq!(&event_id[..], b"16/B374D848:7");
    assert_eq!(keyless.key, Some(event_id), "keyed by its event id");
    assert_eq!(header(&keyless, KEY_HEADER), None, "no original key");
    // The same failure makes the same record: a re-send is identical.
    let again = dead.record(&failure(None));
    assert_eq!((again.key, again.headers), (keyless.key, keyless.headers));
}
