//! systemd's `Type=notify`: with `NOTIFY_SOCKET` set, as systemd sets it,
//! the gateway says `READY=1` only once its listeners take connections
//! (systemd then starts what is ordered after it), and `STOPPING=1` when
//! SIGTERM starts the drain.

mod common;

use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

/// How long to wait for a notification.
const NOTIFY_WAIT_MAX: Duration = Duration::from_secs(20);

fn recv(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).expect("a notification in time");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn ready_once_the_listeners_are_bound_then_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket.set_read_timeout(Some(NOTIFY_WAIT_MAX)).unwrap();
    let port = free_port();
    // At the moment READY=1 arrives, both ports must take a connection:
    // the check runs in this thread, before the harness even sees the
    // listeners. The admin port is chosen by the harness; the STATUS line
    // names it.
    let receiver = std::thread::spawn(move || {
        let ready = recv(&socket);
        let public = TcpStream::connect(("127.0.0.1", port)).is_ok();
        let admin = ready
            .split_once(", admin on ")
            .and_then(|(_, rest)| rest.lines().next()?.parse::<std::net::SocketAddr>().ok())
            .is_some_and(|admin| TcpStream::connect(admin).is_ok());
        (ready, public && admin, socket)
    });
    let gw = Gateway::start(GatewayOptions {
        listen_port: Some(port),
        env: vec![("NOTIFY_SOCKET".into(), path.display().to_string())],
        ..Default::default()
    });
    let (ready, accepting, socket) = receiver.join().unwrap();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    assert!(
        accepting,
        "READY=1 came before both listeners took connections: {ready:?}"
    );
    assert!(
        ready.contains(&format!(
            "STATUS=listening on {}, admin on {}\n",
            gw.listen, gw.admin
        )),
        "{ready:?}"
    );

    gw.signal(Signal::SIGTERM);
    let stopping = recv(&socket);
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
}
