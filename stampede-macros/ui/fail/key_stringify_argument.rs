use stampede::cached;

// `stringify!(id)` is the text "id", the same for every `id`: the argument is not in the key.
#[cached(fresh = "60s", key = stringify!(id).to_owned(), key_type = String)]
async fn label(id: u64) -> u64 {
    id
}

fn main() {}
