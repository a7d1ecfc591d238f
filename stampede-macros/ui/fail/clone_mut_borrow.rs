use stampede::cached;

#[derive(Clone)]
struct Conn;

#[cached(fresh = "60s", clone(conn))]
async fn balance(id: u64, conn: &mut Conn) -> u64 {
    let _ = conn;
    id
}

fn main() {}
