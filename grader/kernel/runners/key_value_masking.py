"""Kernel side of ``key-value-masking``: the student's padding mask and attention."""

from grader.kernel.runners._common import (
    Run,
    call_and_unpack,
    lookup,
    numpy_results,
    tensors,
    with_gradients,
)

MASK_TARGETS = {"tf": "padding_mask_tf", "torch": "padding_mask_torch"}
ATTN_TARGETS = {"tf": "masked_attention_tf", "torch": "masked_attention_torch"}


def run_mask(
    framework: str, namespace: dict, inputs: dict, gradients: bool = False
) -> dict:
    name = MASK_TARGETS[framework]
    fn = lookup(namespace, name)
    ids = tensors(framework, inputs, ("token_ids",))["token_ids"]
    out = call_and_unpack(
        f"{name}(token_ids, pad_id)", fn, (ids, int(inputs["pad_id"])), {}, ("mask",)
    )
    return numpy_results(out, name)


def run_attention(
    framework: str, namespace: dict, inputs: dict, gradients: bool = True
) -> dict:
    name = ATTN_TARGETS[framework]
    fn = lookup(namespace, name)
    t = tensors(
        framework,
        inputs,
        ("queries", "keys", "values", "key_mask"),
        variables=("queries", "values"),
    )
    g = tensors(framework, inputs, ("upstream",))["upstream"]
    what = f"{name}(queries, keys, values, key_mask)"

    def forward():
        return call_and_unpack(
            what,
            fn,
            (t["queries"], t["keys"], t["values"], t["key_mask"]),
            {},
            ("outputs", "weights"),
        )

    if not gradients:
        return numpy_results(forward(), name)
    sources = {"queries": t["queries"], "values": t["values"]}
    return with_gradients(framework, forward, sources, {"outputs": g}, name)


RUNS = {
    "padding_mask": Run(run_mask, cases=("tokens",)),
    "masked_attention": Run(run_attention, cases=("main",), gradients=True),
    "fully_masked": Run(run_attention, cases=("empty",), gradients=True),
}
