r"""Recomputes, then asks autograd.grad for the gradients of x and of the parameters, and adds
the parameters' to their .grad itself.

Answer cell: 15-recompute
Test cell: 15-recompute-test, 15-recompute-memory-test
"""

from keeps_the_input import KeepsTheInput


class Recompute(KeepsTheInput):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        params = [p for p in ctx.stage.parameters() if p.requires_grad]
        with torch.enable_grad():
            again = x.detach().requires_grad_()
            output = ctx.stage(again)
        grad_x, *grads = torch.autograd.grad(output, [again, *params], grad_output)
        for param, grad in zip(params, grads):
            param.grad = grad if param.grad is None else param.grad + grad
        return None, grad_x
