"""The PyTorch training and data helpers follow the model's device.

Every helper that turns a task's arrays into tensors (train_tiny,
TinyTransformer's tokens, train_seq2seq, teacher_forced_predict,
greedy_translate, sequence_accuracy, induction_score) must put them where the
model's parameters are; a helper that made its tensors on the CPU fails with a
CUDA model ("target is on cpu, different from other tensors on cuda:0").

Where the machine has a second device (CUDA or Apple's MPS) the helpers run
there and must give the CPU's numbers. Everywhere, PyTorch's "meta" device
stands in for it: meta tensors carry no data but are checked for device
agreement like any other, so a helper that leaves a tensor on the CPU fails at
that operation, while one that keeps everything on the model's device gets as
far as the first read of a number back to the host, which a meta tensor
cannot give. And tensors already on the model's device give the same numbers
as NumPy arrays.
"""

import numpy as np
import pytest
import torch

import attncourse.torch as atorch
from attncourse import data, tasks
from attncourse.torch import train as torch_train

ACCELERATORS = [
    name
    for name, present in (
        ("cuda", torch.cuda.is_available()),
        (
            "mps",
            getattr(torch.backends, "mps", None) is not None
            and torch.backends.mps.is_available(),
        ),
    )
    if present
]
# what a meta tensor says when it is read, never a device mismatch
NO_DATA = r"(meta tensors|Cannot copy out of meta|meta device type tensor)"


def tiny_model(device="cpu"):
    torch.manual_seed(0)
    model = atorch.TinyTransformer(
        vocab_size=12, d_model=16, num_heads=2, num_layers=1, max_len=16
    )
    return model.to(device)


def tiny_tokens():
    return tasks.induction_task(8, 8, 12, seed=0)  # (8, 16)


def seq2seq(task, device="cpu"):
    """A small bahdanau encoder-decoder with seeded weights, on ``device``."""
    torch.manual_seed(0)
    encoder, decoder = torch_train.build_seq2seq(task, "bahdanau", 8, 16)
    return encoder.to(device), decoder.to(device)


@pytest.fixture(scope="module")
def task():
    return data.make_zh_en_task(num_train=8, num_test=4)


def run_all(device, task):
    """Every helper once on ``device``: their results as NumPy arrays."""
    model = tiny_model(device)
    tokens = tiny_tokens()
    losses = atorch.train_tiny(model, tokens, 3, 4, 1e-2)
    logits, weights = model(tokens, return_weights=True)
    scores = atorch.induction_score(weights[0], tokens)
    encoder, decoder = seq2seq(task, device)
    s2s = torch_train.train_seq2seq(encoder, decoder, task, 2, 4, 1e-2)
    forced = torch_train.teacher_forced_predict(encoder, decoder, task)
    greedy = torch_train.greedy_translate(encoder, decoder, task)
    accuracy = torch_train.sequence_accuracy(encoder, decoder, task)
    for module in (model, encoder, decoder):
        assert all(p.device.type == device for p in module.parameters())
    return {
        "train_tiny": losses,
        "logits": logits.detach().cpu().numpy(),
        "induction_score": scores.detach().cpu().numpy(),
        "train_seq2seq": s2s,
        "teacher_forced": forced[1],
        "greedy": greedy[1],
        "accuracy": np.array(accuracy),
    }


@pytest.mark.parametrize("device", ACCELERATORS or ["none"])
def test_helpers_on_an_accelerator_give_the_cpus_numbers(device, task):
    if device == "none":
        pytest.skip("no CUDA or MPS device on this machine")
    on_cpu, on_device = run_all("cpu", task), run_all(device, task)
    for name, want in on_cpu.items():
        np.testing.assert_allclose(on_device[name], want, atol=1e-4, err_msg=name)


def test_tensors_already_on_the_models_device_give_the_same_numbers(task):
    tokens = tiny_tokens()
    from_numpy = atorch.train_tiny(tiny_model(), tokens, 3, 4, 1e-2)
    from_tensor = atorch.train_tiny(tiny_model(), torch.as_tensor(tokens), 3, 4, 1e-2)
    np.testing.assert_array_equal(from_tensor, from_numpy)
    encoder, decoder = seq2seq(task)
    split = task.split("test")
    enc_outputs, state = encoder(split.src, split.src_lens)
    mask = torch.as_tensor(split.src_lens)[:, None] > torch.arange(split.src.shape[1])
    from_numpy = decoder(split.tgt_in, state, enc_outputs, mask)
    from_tensor = decoder(torch.as_tensor(split.tgt_in), state, enc_outputs, mask)
    for a, b in zip(from_numpy, from_tensor, strict=True):
        torch.testing.assert_close(a, b)


def test_tiny_helpers_keep_every_tensor_on_the_models_device():
    model, tokens = tiny_model("meta"), tiny_tokens()
    logits = model(tokens)  # NumPy tokens go to the model
    assert logits.device.type == "meta"
    loss = atorch.next_token_loss(logits, torch.as_tensor(tokens, device="meta"))
    assert loss.device.type == "meta"
    with pytest.raises((RuntimeError, NotImplementedError), match=NO_DATA):
        atorch.train_tiny(model, tokens, 2, 4, 1e-2)  # stops at loss.item()


@pytest.mark.parametrize(
    "helper",
    ["train_seq2seq", "teacher_forced_predict", "greedy_translate"],
)
def test_seq2seq_helpers_keep_every_tensor_on_the_models_device(helper, task):
    encoder, decoder = seq2seq(task, "meta")
    args = {"train_seq2seq": (task, 2, 4, 1e-2)}.get(helper, (task,))
    with pytest.raises((RuntimeError, NotImplementedError), match=NO_DATA):
        getattr(torch_train, helper)(encoder, decoder, *args)
