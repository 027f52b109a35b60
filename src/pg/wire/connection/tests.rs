use super::*;

#[test]
fn server_versions() {
    assert_eq!(parse_server_version("18.4"), 180004);
    assert_eq!(parse_server_version("14.12 (Debian 14.12-1)"), 140012);
    assert_eq!(parse_server_version("17devel"), 170000);
    assert_eq!(parse_server_version("9.6.3"), 90603);
    assert_eq!(parse_server_version("garbage"), 0);
}
