use stampede::cached;

fn to_string(error: stampede::Error) -> String {
    error.to_string()
}

#[cached(fresh = "60s", map_error = to_string)]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
