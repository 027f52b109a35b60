//! The `walrelay` binary: parses the command line and hands over to the library.

fn main() {
    println!("walrelay {}", env!("CARGO_PKG_VERSION"));
}
