// A scope-bound tensor sent to another thread.
//
// `spawn_worker` runs its job on another thread (as `std::thread::spawn`
// does), so the job must be `Send`. A `Scoped` handle belongs to the thread
// that opened its scope and is not `Send`; move it out first.
use tensorscope::{scope, DType, Device};

fn spawn_worker<F: FnOnce() + Send>(job: F) {
    std::thread::scope(|t| {
        t.spawn(job);
    });
}

fn main() {
    scope(|s| {
        let x = s.zeros(&[4], DType::F32, Device::Cpu).unwrap();
        spawn_worker(move || println!("{:?}", x.shape()));
    });
}
