use super::*;

#[test]
fn parses_proc_formats_and_refuses_garbage() {
    assert_eq!(
        resident_bytes("Name:\twalrelay\nVmRSS:\t   20480 kB\nThreads:\t9\n"),
        Some(20480 * 1024)
    );
    assert_eq!(resident_bytes("VmRSS: lots"), None);
    let stat = "4242 (wal relay) (x)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 9 0";
    assert_eq!(cpu_seconds(stat), Some(3.0));
    assert_eq!(cpu_seconds("4242 (walrelay) S 1"), None);
    assert_eq!(cpu_seconds(""), None);
}

#[test]
fn this_process_can_be_read_on_linux() {
    let r = read();
    assert!(r.resident_bytes.is_some_and(|b| b > 0), "{r:?}");
    assert!(r.cpu_seconds.is_some(), "{r:?}");
    assert!(r.open_fds.is_some_and(|n| n > 0), "{r:?}");
}
