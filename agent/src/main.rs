#[allow(dead_code)]
mod linux_os;

fn main() {}
