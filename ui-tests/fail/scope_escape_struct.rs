// A scoped tensor stored in a structure that outlives the scope.
//
// `cache` was made before the scope opened and is used after it closed; a
// `Scoped<'s>` stored in it would dangle once the scope frees its arena.
use tensorscope::{scope, DType, Device, Scoped};

struct Cache<'a> {
    entries: Vec<Scoped<'a>>,
}

fn main() {
    let mut cache = Cache { entries: Vec::new() };
    scope(|s| {
        let t = s.zeros(&[4], DType::F32, Device::Cpu).unwrap();
        cache.entries.push(t);
    });
    println!("{}", cache.entries.len());
}
