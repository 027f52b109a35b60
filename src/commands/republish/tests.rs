use super::*;

#[test]
fn a_republished_record_drops_the_lsn_header_and_says_it_is_republished() {
    let record = Record::new(
        "t".into(),
        Some(Bytes::from_static(b"k")),
        None,
        vec![
            (Arc::from("id"), Bytes::from_static(b"1")),
            (Arc::from("walrelay.lsn"), Bytes::from_static(b"0/0")),
        ],
        None,
    );
    let out = republished(record, &Arc::from(REPUBLISHED_HEADER));
    let names: Vec<&str> = out.headers.iter().map(|(k, _)| &**k).collect();
    assert_eq!(names, ["id", REPUBLISHED_HEADER]);
}
