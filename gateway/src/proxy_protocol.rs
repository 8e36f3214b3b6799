//! PROXY protocol v1 and v2 on the public listener
//! (`gateway.proxy_protocol = true`).
//!
//! A load balancer that terminates TCP sends one header before anything
//! else, naming the client's address. The header is read here, parsed by
//! the `ppp` crate, and its source address replaces the peer address of
//! the connection's socket digest, so `session.client_addr()` (and so
//! [`crate::client`]) sees the real client. A connection whose first
//! bytes are not a complete, valid header within [`HEADER_TIMEOUT`] and
//! [`HEADER_BYTES_MAX`] is dropped. `LOCAL` (v2) and `UNKNOWN` (v1)
//! headers, which balancers send for their own health checks, keep the
//! TCP peer.
//!
//! The bytes are read one at a time up to the v1 line's CRLF, or for v2
//! the fixed 16 bytes that announce the rest's length, read at once; then
//! `ppp` parses the whole header. Nothing after the header is consumed: the HTTP request or the TLS
//! handshake that follows is read by pingora as if the header had never
//! been there. On a TLS listener this runs in pingora's `PreTlsProcess`
//! callback ([`crate::connections::BeforeTls`]), before the handshake; on
//! plain TCP it runs first in [`crate::connections`]'s application.

use std::net::SocketAddr;
use std::time::Duration;

use pingora::protocols::l4::socket::SocketAddr as PeerAddr;
use pingora::protocols::{GetSocketDigest, SocketDigest, UniqueID};
use ppp::HeaderResult;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Longest wait for the whole header. A balancer sends it with its first
/// packet; only a stray client or a scanner is slower.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest header accepted: a v1 line is at most 107 bytes; a v2 header
/// is 16 bytes plus addresses and TLVs, which balancers keep small.
pub const HEADER_BYTES_MAX: usize = 16 + 1024;
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
const V1_PREFIX: &[u8; 6] = b"PROXY ";
/// The longest v1 line the protocol allows, CRLF included.
const V1_BYTES_MAX: usize = 107;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum HeaderError {
    #[error("no PROXY protocol header within {HEADER_TIMEOUT:?}")]
    Timeout,
    #[error("connection closed before the PROXY protocol header ended")]
    Closed,
    #[error("PROXY protocol header longer than {HEADER_BYTES_MAX} bytes")]
    TooLong,
    #[error("not a valid PROXY protocol header: {0}")]
    Invalid(String),
}

/// Reads one PROXY protocol header from the start of `stream`: the
/// client's address, or `None` for a `LOCAL`/`UNKNOWN` header.
pub async fn read_header<S: AsyncRead + Unpin + ?Sized>(
    stream: &mut S,
) -> Result<Option<SocketAddr>, HeaderError> {
    tokio::time::timeout(HEADER_TIMEOUT, read_header_untimed(stream))
        .await
        .map_err(|_| HeaderError::Timeout)?
}

async fn read_header_untimed<S: AsyncRead + Unpin + ?Sized>(
    stream: &mut S,
) -> Result<Option<SocketAddr>, HeaderError> {
    let mut buf = Vec::with_capacity(128);
    loop {
        let mut byte = [0u8];
        match stream.read(&mut byte).await {
            Ok(1) => buf.push(byte[0]),
            _ => return Err(HeaderError::Closed),
        }
        let v2 = V2_SIGNATURE.starts_with(&buf) || buf.starts_with(V2_SIGNATURE);
        if v2 && buf.len() == 16 {
            let length = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
            if 16 + length > HEADER_BYTES_MAX {
                return Err(HeaderError::TooLong);
            }
            buf.resize(16 + length, 0);
            stream
                .read_exact(&mut buf[16..])
                .await
                .map_err(|_| HeaderError::Closed)?;
            return source(HeaderResult::parse(&buf));
        }
        if v2 {
            continue;
        }
        if !(V1_PREFIX.starts_with(&buf) || buf.starts_with(V1_PREFIX)) {
            return Err(HeaderError::Invalid("no PROXY signature".into()));
        }
        if buf.ends_with(b"\r\n") {
            return source(HeaderResult::parse(&buf));
        }
        if buf.len() >= V1_BYTES_MAX {
            return Err(HeaderError::TooLong);
        }
    }
}

fn source(parsed: HeaderResult<'_>) -> Result<Option<SocketAddr>, HeaderError> {
    match parsed {
        HeaderResult::V1(Ok(header)) => Ok(match header.addresses {
            ppp::v1::Addresses::Tcp4(a) => Some((a.source_address, a.source_port).into()),
            ppp::v1::Addresses::Tcp6(a) => Some((a.source_address, a.source_port).into()),
            ppp::v1::Addresses::Unknown => None,
        }),
        HeaderResult::V2(Ok(header)) => Ok(match (header.command, header.addresses) {
            (ppp::v2::Command::Local, _) => None,
            (_, ppp::v2::Addresses::IPv4(a)) => Some((a.source_address, a.source_port).into()),
            (_, ppp::v2::Addresses::IPv6(a)) => Some((a.source_address, a.source_port).into()),
            (_, ppp::v2::Addresses::Unspecified | ppp::v2::Addresses::Unix(_)) => None,
        }),
        HeaderResult::V1(Err(e)) => Err(HeaderError::Invalid(e.to_string())),
        HeaderResult::V2(Err(e)) => Err(HeaderError::Invalid(e.to_string())),
    }
}

/// Reads the header from `stream` and makes its source the stream's peer.
pub async fn accept<S>(stream: &mut S) -> Result<(), HeaderError>
where
    S: AsyncRead + GetSocketDigest + UniqueID + Unpin + ?Sized,
{
    if let Some(client) = read_header(stream).await? {
        // The fd is the socket's (UniqueID of a TCP stream is its fd), so
        // the local address is still looked up on the real socket.
        let digest = SocketDigest::from_raw_fd(stream.id());
        let _ = digest.peer_addr.set(Some(PeerAddr::Inet(client)));
        stream.set_socket_digest(digest);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ppp::v2::{Builder, Command, Protocol, Version};

    async fn read(bytes: &[u8]) -> (Result<Option<SocketAddr>, HeaderError>, Vec<u8>) {
        let mut cursor = std::io::Cursor::new(bytes.to_vec());
        let result = read_header(&mut cursor).await;
        let mut rest = Vec::new();
        cursor.read_to_end(&mut rest).await.unwrap();
        (result, rest)
    }

    fn v2(addresses: ppp::v2::Addresses, command: Command) -> Vec<u8> {
        Builder::with_addresses(Version::Two | command, Protocol::Stream, addresses)
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn v1_names_the_client_and_leaves_the_request() {
        let (r, rest) =
            read(b"PROXY TCP4 203.0.113.7 10.0.0.1 56324 443\r\nGET / HTTP/1.1\r\n").await;
        assert_eq!(r, Ok(Some("203.0.113.7:56324".parse().unwrap())));
        assert_eq!(rest, b"GET / HTTP/1.1\r\n");
        let (r, _) = read(b"PROXY TCP6 2001:db8::7 2001:db8::1 4000 443\r\n").await;
        assert_eq!(r, Ok(Some("[2001:db8::7]:4000".parse().unwrap())));
        let (r, rest) = read(b"PROXY UNKNOWN\r\nGET").await;
        assert_eq!((r, rest), (Ok(None), b"GET".to_vec()));
    }

    #[tokio::test]
    async fn v2_names_the_client_and_leaves_the_request() {
        let addresses: ppp::v2::Addresses =
            ppp::v2::IPv4::new([203, 0, 113, 7], [10, 0, 0, 1], 5000, 443).into();
        let mut bytes = v2(addresses, Command::Proxy);
        bytes.extend_from_slice(b"\x16\x03\x01");
        let (r, rest) = read(&bytes).await;
        assert_eq!(r, Ok(Some("203.0.113.7:5000".parse().unwrap())));
        assert_eq!(rest, b"\x16\x03\x01");
        let addresses: ppp::v2::Addresses = ppp::v2::IPv6::new(
            "2001:db8::7".parse::<std::net::Ipv6Addr>().unwrap(),
            "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap(),
            1,
            2,
        )
        .into();
        let (r, _) = read(&v2(addresses, Command::Proxy)).await;
        assert_eq!(r, Ok(Some("[2001:db8::7]:1".parse().unwrap())));
        let (r, _) = read(&v2(addresses, Command::Local)).await;
        assert_eq!(r, Ok(None), "a balancer's own health check");
    }

    #[tokio::test]
    async fn anything_else_is_refused() {
        for bad in [
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 1\r\n",
            b"PROXY TCP4 not-an-ip 5.6.7.8 1 1\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
            b"\r\n\r\n\0\r\nQUIT\n\x99\x11\x00\x0c",
        ] {
            let (r, _) = read(bad).await;
            assert!(
                matches!(r, Err(HeaderError::Invalid(_)) | Err(HeaderError::Closed)),
                "{bad:?}: {r:?}"
            );
        }
        let (r, _) = read(b"PROXY TCP4 1.2.3.4").await;
        assert_eq!(r, Err(HeaderError::Closed), "cut short");
        let long = [b"PROXY TCP4 ".as_slice(), &[b'1'; 2000]].concat();
        let (r, _) = read(&long).await;
        assert!(r.is_err(), "a v1 line without end is not read forever");
        let mut huge = V2_SIGNATURE.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        let (r, _) = read(&huge).await;
        assert_eq!(r, Err(HeaderError::TooLong));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_header_times_out() {
        let (_client, mut server) = tokio::io::duplex(64);
        let r = read_header(&mut server).await;
        assert_eq!(r, Err(HeaderError::Timeout));
    }
}
