//! A fault-injecting TCP proxy (bytes only, so TLS passes through untouched).

use std::io;
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with traffic right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Forward,
    /// Nothing flows either way; connections are held open; new ones are accepted and held.
    Partition,
    /// Requests flow to the server, responses are held back (the server acts, the client never
    /// learns). New connections are connected upstream as usual.
    DropResponses,
}

#[derive(Clone, Copy, Debug)]
struct Control {
    mode: Mode,
    /// Bumped by `cut()`: every connection opened before the bump closes.
    cuts: u64,
    /// How long each chunk read is held before it is passed on, either way (a slow server).
    delay: Duration,
}

/// Counters, for tests that want to see that traffic went through (or did not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted so far.
    pub accepted: u64,
    /// Connections accepted and not yet closed.
    pub open: u64,
    /// Of those, how many are held by a partition or `drop_responses` (closed when it heals).
    pub held: u64,
    /// Upstream connections made so far.
    pub connected_upstream: u64,
    /// Bytes forwarded client -> server and server -> client.
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Connections closed by `cut()`.
    pub cut: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    open: AtomicU64,
    held: AtomicU64,
    connected_upstream: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    cut: AtomicU64,
}

/// A TCP proxy on `127.0.0.1:<port>` to one upstream. Everything (listener and connections)
/// stops when it is dropped.
pub struct Proxy {
    addr: SocketAddr,
    control: watch::Sender<Control>,
    upstream: Arc<Mutex<SocketAddr>>,
    counters: Arc<Counters>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on 127.0.0.1 (a free port) and forwards every connection to `upstream`.
    /// Must be called within a tokio runtime (it runs there until dropped).
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("proxy listen");
        listener.set_nonblocking(true).expect("nonblocking");
        let listener = TcpListener::from_std(listener).expect("proxy listener (in a tokio runtime?)");
        let addr = listener.local_addr().expect("proxy addr");
        let (control, rx) = watch::channel(Control {
            mode: Mode::Forward,
            cuts: 0,
            delay: Duration::ZERO,
        });
        let upstream = Arc::new(Mutex::new(upstream));
        let counters = Arc::new(Counters::default());
        let accept = tokio::spawn(accept_loop(listener, rx, upstream.clone(), counters.clone()));
        Proxy {
            addr,
            control,
            upstream,
            counters,
            accept,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:<port>`, for a kubeconfig.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Closes every connection open now, with a reset. New connections work as before (unless
    /// partitioned).
    pub fn cut(&self) {
        self.control.send_modify(|c| c.cuts += 1);
    }

    /// `true`: a black hole. Open connections stop forwarding both ways (held open: no bytes,
    /// no close); new connections are accepted but never connected upstream, so requests hang.
    /// `false`: heals; every connection that was held is closed then, so clients reconnect.
    pub fn partition(&self, on: bool) {
        self.set_mode(if on { Mode::Partition } else { Mode::Forward });
    }

    /// `true`: requests still reach the server, but nothing comes back (an asymmetric
    /// partition: the server acts on requests whose clients time out). `false` heals as
    /// `partition(false)` does.
    pub fn drop_responses(&self, on: bool) {
        self.set_mode(if on { Mode::DropResponses } else { Mode::Forward });
    }

    /// Holds every chunk `delay` before passing it on, both ways, on open and new connections
    /// (`Duration::ZERO`: none). Chunks keep their order, so a stream slows down as well.
    pub fn delay(&self, delay: Duration) {
        self.control.send_modify(|c| c.delay = delay);
    }

    fn set_mode(&self, mode: Mode) {
        self.control.send_modify(|c| c.mode = mode);
    }

    /// Where new connections go (open ones stay where they are).
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *self.upstream.lock().unwrap() = upstream;
    }

    pub fn upstream(&self) -> SocketAddr {
        *self.upstream.lock().unwrap()
    }

    pub fn stats(&self) -> ProxyStats {
        let c = &self.counters;
        ProxyStats {
            accepted: c.accepted.load(Ordering::SeqCst),
            open: c.open.load(Ordering::SeqCst),
            held: c.held.load(Ordering::SeqCst),
            connected_upstream: c.connected_upstream.load(Ordering::SeqCst),
            bytes_up: c.bytes_up.load(Ordering::SeqCst),
            bytes_down: c.bytes_down.load(Ordering::SeqCst),
            cut: c.cut.load(Ordering::SeqCst),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Dropping `control` (after this) ends every connection task; the listener goes with
        // the accept task.
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    mut control: watch::Receiver<Control>,
    upstream: Arc<Mutex<SocketAddr>>,
    counters: Arc<Counters>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                counters.accepted.fetch_add(1, Ordering::SeqCst);
                counters.open.fetch_add(1, Ordering::SeqCst);
                let to = *upstream.lock().unwrap();
                let rx = control.clone();
                let cuts = rx.borrow().cuts;
                let c = counters.clone();
                tokio::spawn(async move {
                    serve(stream, to, rx, cuts, &c).await;
                    c.open.fetch_sub(1, Ordering::SeqCst);
                });
            }
            changed = control.changed() => if changed.is_err() { return },
        }
    }
}

/// Why a connection stops forwarding.
enum Event {
    /// `cut()`, or the proxy was dropped: close now.
    Close,
    /// A partition started: hold the connection until it heals.
    Mode(Mode),
}

/// Waits for a cut, the proxy going away, or a change to a mode other than `Forward`.
async fn next_event(control: &mut watch::Receiver<Control>, cuts: u64) -> Event {
    loop {
        let c = *control.borrow_and_update();
        if c.cuts != cuts {
            return Event::Close;
        }
        if c.mode != Mode::Forward {
            return Event::Mode(c.mode);
        }
        if control.changed().await.is_err() {
            return Event::Close;
        }
    }
}

/// Waits until the fault is over (healed, cut or proxy gone); the caller then closes.
async fn hold_until_healed(control: &mut watch::Receiver<Control>, cuts: u64, held: Mode) {
    loop {
        let c = *control.borrow_and_update();
        if c.cuts != cuts || c.mode != held {
            return;
        }
        if control.changed().await.is_err() {
            return;
        }
    }
}

/// A socket with a second handle on the same file, for half-closes.
struct Conn {
    stream: TcpStream,
    handle: std::net::TcpStream,
}

impl Conn {
    fn new(stream: TcpStream) -> io::Result<Conn> {
        let std = stream.into_std()?;
        let handle = std.try_clone()?;
        Ok(Conn {
            stream: TcpStream::from_std(std)?,
            handle,
        })
    }

    /// Makes the close (once every handle is dropped) a reset.
    fn reset(&self) {
        let _ = self.stream.set_zero_linger();
    }
}

async fn serve(
    client: TcpStream,
    to: SocketAddr,
    mut control: watch::Receiver<Control>,
    cuts: u64,
    counters: &Counters,
) {
    let _ = client.set_nodelay(true);
    let Ok(client) = Conn::new(client) else { return };
    let upstream = async {
        // A connection that arrives during a partition waits for it to end (and is then
        // closed): it is never connected upstream.
        let c = *control.borrow_and_update();
        if c.cuts != cuts {
            return None;
        }
        if c.mode == Mode::Partition {
            counters.held.fetch_add(1, Ordering::SeqCst);
            hold_until_healed(&mut control, cuts, Mode::Partition).await;
            counters.held.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        let stream = TcpStream::connect(to).await.ok()?;
        counters.connected_upstream.fetch_add(1, Ordering::SeqCst);
        let _ = stream.set_nodelay(true);
        Conn::new(stream).ok()
    }
    .await;
    let Some(upstream) = upstream else {
        if control.borrow().cuts != cuts {
            counters.cut.fetch_add(1, Ordering::SeqCst);
            client.reset();
        }
        return;
    };
    let up = pump(&client, &upstream, &counters.bytes_up, control.clone());
    let down = pump(&upstream, &client, &counters.bytes_down, control.clone());
    tokio::pin!(up, down);
    let (mut up_done, mut down_done) = (false, false);
    let event = loop {
        tokio::select! {
            result = &mut up, if !up_done => {
                up_done = true;
                if result.is_err() || down_done { break None; }
            }
            result = &mut down, if !down_done => {
                down_done = true;
                if result.is_err() || up_done { break None; }
            }
            event = next_event(&mut control, cuts) => break Some(event),
        }
    };
    match event {
        None => {}
        Some(Event::Close) => {
            counters.cut.fetch_add(1, Ordering::SeqCst);
            client.reset();
            upstream.reset();
        }
        Some(Event::Mode(mode)) => {
            counters.held.fetch_add(1, Ordering::SeqCst);
            if mode == Mode::DropResponses && !up_done {
                // Requests keep flowing until the fault ends; responses are swallowed.
                tokio::select! {
                    _ = &mut up => hold_until_healed(&mut control, cuts, mode).await,
                    _ = hold_until_healed(&mut control, cuts, mode) => {}
                }
            } else {
                hold_until_healed(&mut control, cuts, mode).await;
            }
            counters.held.fetch_sub(1, Ordering::SeqCst);
            if control.borrow().cuts != cuts {
                counters.cut.fetch_add(1, Ordering::SeqCst);
            }
            client.reset();
            upstream.reset();
        }
    }
}

/// Copies `from` to `to` until `from` ends (then half-closes `to`) or fails, holding each chunk
/// for the delay `control` says.
async fn pump(
    from: &Conn,
    to: &Conn,
    bytes: &AtomicU64,
    control: watch::Receiver<Control>,
) -> io::Result<()> {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        from.stream.readable().await?;
        let n = match from.stream.try_read(&mut buf) {
            Ok(0) => {
                let _ = to.handle.shutdown(Shutdown::Write);
                return Ok(());
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        let delay = control.borrow().delay;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let mut sent = 0;
        while sent < n {
            to.stream.writable().await?;
            match to.stream.try_write(&buf[sent..n]) {
                Ok(k) => sent += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        bytes.fetch_add(n as u64, Ordering::SeqCst);
    }
}
