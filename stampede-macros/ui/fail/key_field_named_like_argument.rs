use stampede::cached;

#[derive(Clone)]
struct User {
    id: u64,
}

// `user.id` is a field of `user`, not the argument `id`: `id` is in neither list.
#[cached(fresh = "60s", key = user.id, key_type = u64)]
async fn balance(user: User, id: u64) -> u64 {
    user.id + id
}

fn main() {}
