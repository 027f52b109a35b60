use super::*;

#[test]
fn watermarks_name_connector_run_and_chunk() {
    let w = watermark("orders", 7, 3, "high");
    assert_eq!(parse_watermark(w.as_bytes(), "orders", 7), Some((3, true)));
    let w = watermark("orders", 7, 4, "low");
    assert_eq!(parse_watermark(w.as_bytes(), "orders", 7), Some((4, false)));
    // Another connector's, or an earlier run's (replayed after a
    // restart), is not ours.
    assert_eq!(parse_watermark(w.as_bytes(), "billing", 7), None);
    assert_eq!(parse_watermark(w.as_bytes(), "orders", 8), None);
    assert_eq!(parse_watermark(b"not json", "orders", 7), None);
}
