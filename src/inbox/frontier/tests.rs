use super::*;

#[test]
fn the_position_waits_for_the_lowest_record_in_progress() {
    let mut f = Frontier::new();
    assert_eq!(f.position(), None);
    for o in [3, 4, 7, 8] {
        f.receive(o, ()).unwrap();
    }
    assert_eq!(f.position(), Some(3));
    f.complete(4).unwrap();
    f.complete(8).unwrap();
    assert_eq!(f.position(), Some(3), "3 is still in progress");
    f.complete(3).unwrap();
    assert_eq!(f.position(), Some(7));
    assert_eq!(f.lag(), 2);
    f.complete(7).unwrap();
    assert_eq!(f.position(), Some(9), "one past the highest received");
    assert_eq!(f.lag(), 0);
    assert_eq!(
        f.receive(8, ()),
        Err(FrontierError::Rewound { offset: 8, last: 8 })
    );
    assert_eq!(f.complete(7), Err(FrontierError::NotInProgress(7)));
}

#[test]
fn a_key_runs_one_record_at_a_time_in_order() {
    let mut k = KeyOrder::new();
    assert_eq!(k.admit(Some("a"), 1), Some(1));
    assert_eq!(k.admit(Some("a"), 2), None);
    assert_eq!(k.admit(Some("b"), 3), Some(3));
    assert_eq!(k.admit(None, 4), Some(4));
    assert_eq!(k.admit(Some("a"), 5), None);
    assert_eq!(k.waiting(), 2);
    assert_eq!(k.finish(Some(&"a")), Some(2));
    assert_eq!(k.finish(Some(&"a")), Some(5));
    assert_eq!(k.finish(Some(&"a")), None);
    assert_eq!(k.admit(Some("a"), 6), Some(6), "the key is free again");
}
