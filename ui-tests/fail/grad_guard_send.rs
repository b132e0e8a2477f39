// A grad-mode guard sent to another thread.
//
// `no_grad` is thread-local, like PyTorch's: a guard switches it off for the
// thread that made it and restores it when dropped. Sending the guard to
// another thread would restore the wrong thread's mode, so `GradModeGuard`
// is not `Send`; open a guard on the thread that needs it.
use tensorscope::autograd;

fn spawn_worker<F: FnOnce() + Send>(job: F) {
    std::thread::scope(|t| {
        t.spawn(job);
    });
}

fn main() {
    let guard = autograd::no_grad_guard();
    spawn_worker(move || drop(guard));
}
