//! A TCP proxy that forwards bytes both ways until told to hold them.
//!
//! A black hole is the worst failure a client can meet: connections stay open, writes
//! succeed, and nothing ever answers, so only the client's own timeouts end a call. A
//! refused connection (a killed server) is the easy case and needs no proxy.
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// Forwards `127.0.0.1:<port>` to an upstream address; see [`Proxy::black_hole`] and
/// [`Proxy::hold_replies`].
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    upstream: SocketAddr,
    /// What is held: every forwarding thread waits here before it writes.
    held: Mutex<Held>,
    healed: Condvar,
    closed: AtomicBool,
    /// Every socket the proxy opened, so dropping it can end the threads blocked in reads.
    sockets: Mutex<Vec<TcpStream>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            held: Mutex::new(Held::default()),
            healed: Condvar::new(),
            closed: AtomicBool::new(false),
            sockets: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        thread::spawn(move || accept_loop(listener, accepting));
        Ok(Self { addr, shared })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding in both directions; connections stay open and new ones are
    /// accepted, but no byte reaches the other side until [`Proxy::heal`].
    pub fn black_hole(&self) {
        self.shared.held.lock().unwrap().both = true;
    }

    /// Forwards requests but holds every reply until [`Proxy::heal`]: the server does what
    /// it is asked and the client never hears of it (a reply lost, or late past any
    /// timeout).
    pub fn hold_replies(&self) {
        self.shared.held.lock().unwrap().replies = true;
    }

    /// Delays every reply by `delay` (`Duration::ZERO` stops delaying): a slow server, or a
    /// client too busy to read its replies in time.
    pub fn delay_replies(&self, delay: Duration) {
        self.shared.held.lock().unwrap().reply_delay = delay;
    }

    /// Forwards again, held bytes first.
    pub fn heal(&self) {
        *self.shared.held.lock().unwrap() = Held::default();
        self.shared.healed.notify_all();
    }

    /// Closes every proxied connection (clients see a reset, as on a server restart).
    pub fn drop_connections(&self) {
        for socket in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.heal();
        self.drop_connections();
        // Wakes the accept loop so it sees `closed` and returns.
        let _ = TcpStream::connect(self.addr);
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.closed.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let Ok(server) = TcpStream::connect(shared.upstream) else {
            // Upstream down: the client sees its connection closed, like a refusal.
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(client_read), Ok(server_read)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        {
            let mut sockets = shared.sockets.lock().unwrap();
            for socket in [&client, &server] {
                if let Ok(socket) = socket.try_clone() {
                    sockets.push(socket);
                }
            }
        }
        let up = Arc::clone(&shared);
        thread::spawn(move || forward(client_read, server, up, Direction::Request));
        let down = Arc::clone(&shared);
        thread::spawn(move || forward(server_read, client, down, Direction::Reply));
    }
}

/// What the proxy holds back now.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    both: bool,
    replies: bool,
    reply_delay: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Request,
    Reply,
}

impl Held {
    fn holds(self, direction: Direction) -> bool {
        self.both || (self.replies && direction == Direction::Reply)
    }
}

/// Copies `from` to `to`; a chunk read while its direction is held waits for the heal.
fn forward(mut from: TcpStream, mut to: TcpStream, shared: Arc<Shared>, direction: Direction) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let held = shared.held.lock().unwrap();
        let held = shared
            .healed
            .wait_while(held, |held| held.holds(direction))
            .unwrap();
        let delay = match direction {
            Direction::Reply => held.reply_delay,
            Direction::Request => Duration::ZERO,
        };
        drop(held);
        if !delay.is_zero() {
            thread::sleep(delay);
        }
        if shared.closed.load(Ordering::SeqCst) || to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
