// A type error in the body is reported in the body, not in generated code.
use stampede::cached;

#[cached(fresh = "60s")]
async fn get(id: u64) -> Result<u64, stampede::Error> {
    if id == 0 {
        return Ok("zero");
    }
    Ok(id)
}

fn main() {}
