"""PyTorch side of benches/mlp.rs: the same MLP 784-1024-1024-10 (ReLU) at
batch 128 on the CPU, the same figures, the same output format."""
import statistics, time, torch

torch.manual_seed(0)
torch.set_num_threads(int(__import__("os").environ.get("THREADS", "2")))

def timeit(reps, f):
    for _ in range(max(2, (reps + 4) // 5)):
        f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)

net = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
x = torch.randn(128, 784)
y = torch.arange(128) % 10
loss_fn = torch.nn.functional.cross_entropy

def fb():
    net.zero_grad(set_to_none=True)
    loss_fn(net(x), y).backward()
print(f"mlp_forward_backward {timeit(30, fb) * 1e3:.3f} ms")
opt = torch.optim.Adam(net.parameters())
def step():
    opt.zero_grad(set_to_none=True)
    loss_fn(net(x), y).backward()
    opt.step()
print(f"mlp_adam_step {timeit(30, step) * 1e3:.3f} ms")
def inf():
    with torch.no_grad():
        net(x)
print(f"mlp_inference_no_grad {timeit(50, inf) * 1e3:.3f} ms")
w = torch.ones(1, requires_grad=True)
def tiny():
    h = w
    for _ in range(100):
        h = h + w
    h.backward()
    w.grad = None
print(f"autograd_tiny_op_fwd_bwd {timeit(50, tiny) / 100 * 1e6:.3f} us")
p = torch.ones(1)
def tiny_plain():
    h = p
    for _ in range(100):
        h = h + p
print(f"tiny_op_no_graph {timeit(50, tiny_plain) / 100 * 1e6:.3f} us")
print(f"torch_version {torch.__version__} -")
