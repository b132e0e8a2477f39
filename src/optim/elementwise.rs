//! The step loop of the optimizers whose update is one elementwise pass
//! over the parameter, its gradient and up to three state buffers
//! ([`RMSprop`](super::RMSprop), [`Adagrad`](super::Adagrad),
//! [`Lion`](super::Lion)): a parameter's state is made on its first step,
//! every later step checks it and runs the fused update
//! (`backend::optim::rule_step`), which allocates nothing.

use std::collections::HashMap;

use super::{check_grad, check_state, state_key, writable_with_grad};
use crate::backend::optim::{rule_step, UpdateRule};
use crate::backend::Operand;
use crate::error::Result;
use crate::nn::Module;
use crate::tensor::Tensor;

/// One parameter's state: its step count and the buffers of the rule's
/// slots (`None` where the rule uses none).
pub(crate) struct Slots {
    pub step: u64,
    pub bufs: [Option<Tensor>; 3],
}

/// The optimizers' state, keyed by [`state_key`].
pub(crate) type SlotMap = HashMap<String, Slots>;

/// One step of every parameter that has a gradient: `rule(t)` gives step
/// `t`'s constants, `init(p)` one buffer of a new parameter's state (made
/// for each slot the rule uses).
pub(crate) fn step(
    op: &'static str,
    model: &mut dyn Module,
    state: &mut SlotMap,
    init: impl Fn(&Tensor) -> Result<Tensor>,
    rule: impl Fn(u64) -> UpdateRule,
) -> Result<()> {
    let _op = crate::alloc::history::op_context(op);
    let _g = crate::autograd::no_grad_guard();
    for (name, p) in model.named_parameters_mut() {
        let Some(g) = p.grad() else { continue };
        check_grad(op, &name, p, &g)?;
        let g = writable_with_grad(op, p, g)?;
        let key = state_key(&name);
        if !state.contains_key(key) {
            let mut bufs = [None, None, None];
            for (b, used) in bufs.iter_mut().zip(rule(1).slots()) {
                if used {
                    *b = Some(init(p)?);
                }
            }
            state.insert(key.to_string(), Slots { step: 0, bufs });
        }
        let st = state.get_mut(key).expect("inserted above");
        for b in st.bufs.iter().flatten() {
            check_state(op, &name, p, b)?;
        }
        let r = rule(st.step + 1);
        let ops = st.bufs.each_ref().map(|b| b.as_ref().map(Operand::of));
        rule_step(
            op,
            &Operand::of(p),
            &Operand::of(&g),
            ops.each_ref().map(Option::as_ref),
            &r,
        )?;
        st.step += 1;
        p.storage().bump_version();
        for b in st.bufs.iter().flatten() {
            b.storage().bump_version();
        }
    }
    Ok(())
}
