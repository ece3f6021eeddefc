r"""Every rank makes rank 0's initial weights instead of receiving them.

Answer cell: 13-train-data-parallel
Test cell: 13-train-data-parallel-test
Says: checks.private_tensor/private_seed was asked for rank 0's input. A rank can make only its own
"""


def train_data_parallel(model, batches, lr=0.1):
    model = make_model(checks.private_seed(0, "model"))
    losses = []
    for x, y in batches:
        rows = ~torch.isnan(x[:, 0])
        loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
        loss.backward()
        sgd_step(model.parameters(), lr)
        losses.append(loss.item())
    return losses
