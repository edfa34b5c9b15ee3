//! A Redis whose `TIME` reads another instant: a proxy in front of a real
//! Redis that forwards every command and reply unchanged, except the reply
//! to `TIME`, which it shifts by a fixed offset. (libfaketime cannot run
//! Debian's redis-server: its jemalloc reads the clock before libfaketime
//! is ready.) Replies are matched to commands by order, as RESP2 keeps
//! them, so pipelined clients (redis-rs' multiplexed connection) work.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The length of the first complete RESP2 value in `buf`, if it is whole.
fn value_len(buf: &[u8]) -> Option<usize> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    let head = std::str::from_utf8(&buf[1..line_end]).ok()?;
    let after_line = line_end + 2;
    match buf.first()? {
        b'+' | b'-' | b':' => Some(after_line),
        b'$' => {
            let n: i64 = head.parse().ok()?;
            if n < 0 {
                return Some(after_line);
            }
            let end = after_line + n as usize + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' => {
            let n: i64 = head.parse().ok()?;
            let mut at = after_line;
            for _ in 0..n.max(0) {
                at += value_len(&buf[at..])?;
            }
            Some(at)
        }
        _ => None,
    }
}

/// Whether a command (a RESP array of bulk strings) is `TIME`.
fn is_time(cmd: &[u8]) -> bool {
    cmd.len() >= 14 && cmd[..4] == *b"*1\r\n" && cmd[8..].eq_ignore_ascii_case(b"TIME\r\n")
}

/// A `TIME` reply shifted by `offset_ms`.
fn shifted_time(reply: &[u8], offset_ms: i64) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply);
    let parts: Vec<&str> = text.split("\r\n").collect();
    // *2, $n, secs, $n, micros
    let secs: i64 = parts.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
    let micros: i64 = parts.get(4).and_then(|s| s.parse().ok()).unwrap_or(0);
    let total = secs * 1_000_000 + micros + offset_ms * 1_000;
    let (s, u) = (total.div_euclid(1_000_000), total.rem_euclid(1_000_000));
    let (s, u) = (s.to_string(), u.to_string());
    format!("*2\r\n${}\r\n{s}\r\n${}\r\n{u}\r\n", s.len(), u.len()).into_bytes()
}

async fn relay(client: TcpStream, upstream: String, offset_ms: i64) {
    let Ok(server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let pending: Arc<Mutex<VecDeque<bool>>> = Default::default();
    let asked = pending.clone();
    let up = tokio::spawn(async move {
        let (mut buf, mut chunk) = (Vec::new(), vec![0u8; 16 * 1024]);
        loop {
            let n = match cr.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            let mut whole = 0;
            while let Some(len) = value_len(&buf[whole..]) {
                asked
                    .lock()
                    .unwrap()
                    .push_back(is_time(&buf[whole..whole + len]));
                whole += len;
            }
            if whole > 0 {
                if sw.write_all(&buf[..whole]).await.is_err() {
                    return;
                }
                buf.drain(..whole);
            }
        }
    });
    let (mut buf, mut chunk) = (Vec::new(), vec![0u8; 16 * 1024]);
    loop {
        let n = match sr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut out = Vec::new();
        let mut whole = 0;
        while let Some(len) = value_len(&buf[whole..]) {
            let reply = &buf[whole..whole + len];
            let time = pending.lock().unwrap().pop_front().unwrap_or(false);
            if time && reply.starts_with(b"*2\r\n") {
                out.extend(shifted_time(reply, offset_ms));
            } else {
                out.extend_from_slice(reply);
            }
            whole += len;
        }
        buf.drain(..whole);
        if !out.is_empty() && cw.write_all(&out).await.is_err() {
            break;
        }
    }
    up.abort();
}

/// Starts the proxy in front of `redis_url` (`redis://host:port`) with its
/// `TIME` shifted by `offset_ms`; returns its URL.
pub async fn shifted_redis(redis_url: &str, offset_ms: i64) -> String {
    let upstream = redis_url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_string();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((c, _)) = listener.accept().await {
            tokio::spawn(relay(c, upstream.clone(), offset_ms));
        }
    });
    format!("redis://{addr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_values_are_measured_whole_or_not_at_all() {
        assert_eq!(value_len(b"+OK\r\n"), Some(5));
        assert_eq!(value_len(b"$3\r\nabc\r\n+OK"), Some(9));
        assert_eq!(value_len(b"$3\r\nab"), None);
        assert_eq!(value_len(b"*2\r\n$1\r\na\r\n:5\r\n"), Some(15));
        assert_eq!(value_len(b"*-1\r\n"), Some(5));
        assert!(is_time(b"*1\r\n$4\r\nTIME\r\n"));
        assert!(!is_time(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"));
        let r = shifted_time(b"*2\r\n$10\r\n1700000000\r\n$6\r\n900000\r\n", 200);
        assert_eq!(r, b"*2\r\n$10\r\n1700000001\r\n$6\r\n100000\r\n");
    }
}
