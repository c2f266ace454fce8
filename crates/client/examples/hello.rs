//! Connects to vinod, writes a file, reads it back and prints what the daemon says about this
//! process. `VINO_SOCKET` (or the first argument) names the socket.
//!
//!     cargo run --release -p vino-client --example hello [SOCKET] [PATH]

use vino_client::{Client, OpenFlags};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut c = match args.next() {
        Some(socket) => Client::connect(socket)?,
        None => Client::connect_default()?,
    };
    let path = args.next().unwrap_or_else(|| format!("/hello-{}", std::process::id()));
    let fd = c.open(&path, OpenFlags::create())?;
    c.write(fd, b"hello from a client of vinod\n")?;
    let mut buf = [0u8; 64];
    let n = c.pread(fd, &mut buf, 0)?;
    c.close(fd)?;
    print!("{}", String::from_utf8_lossy(&buf[..n]));
    let top = c.top()?;
    let me = top
        .processes
        .iter()
        .find(|p| p.pid == c.pid())
        .ok_or("this process is not in top")?;
    println!(
        "kernel pid {}, {} system calls, {} bytes written",
        me.pid, me.syscalls, me.bytes_written
    );
    Ok(())
}
