use super::*;

#[test]
fn hash_split_parts_must_be_valid() {
    assert!(HashSplit::new("a", 0, 0).is_err());
    assert!(HashSplit::new("a", 2, 2).is_err());
    assert_eq!(HashSplit::all("a", 4).unwrap().len(), 4);
    assert!(HashSplit::new("a", 1, 0).is_ok());
}
