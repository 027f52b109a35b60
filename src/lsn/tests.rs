use super::*;
use proptest::prelude::*;

#[test]
fn displays_like_postgres() {
    assert_eq!(Lsn(0).to_string(), "0/00000000");
    assert_eq!(Lsn(0x16_B374_D848).to_string(), "16/B374D848");
    assert_eq!(Lsn(0x1_0000_0001).to_string(), "1/00000001");
}

#[test]
fn parses_postgres_forms() {
    assert_eq!("0/0".parse::<Lsn>(), Ok(Lsn(0)));
    assert_eq!("16/B374D848".parse::<Lsn>(), Ok(Lsn(0x16_B374_D848)));
    assert_eq!("16/b374d848".parse::<Lsn>(), Ok(Lsn(0x16_B374_D848)));
}

#[test]
fn rejects_garbage() {
    for bad in [
        "",
        "/",
        "1/",
        "/1",
        "1",
        "G/0",
        "1/2/3",
        "123456789/0",
        "-1/0",
    ] {
        assert!(bad.parse::<Lsn>().is_err(), "{bad:?} parsed");
    }
}

proptest! {
    #[test]
    fn display_parse_round_trip(v in any::<u64>()) {
        prop_assert_eq!(Lsn(v).to_string().parse::<Lsn>(), Ok(Lsn(v)));
    }
}
