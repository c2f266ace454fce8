//! What the VINO-process tests share: standard streams captured in memory.

use std::io::Write;
use std::sync::{Arc, Mutex};
use vino_wasi::Stdio;

/// A stream that keeps what is written to it.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }
}

/// Streams for a program: `stdin` to read, stdout and stderr kept.
pub fn stdio(stdin: Vec<u8>) -> (Stdio, Captured, Captured) {
    let (out, err) = (Captured::default(), Captured::default());
    let stdio = Stdio {
        stdin: Box::new(std::io::Cursor::new(stdin)),
        stdout: Box::new(out.clone()),
        stderr: Box::new(err.clone()),
        tty: [false; 3],
    };
    (stdio, out, err)
}
