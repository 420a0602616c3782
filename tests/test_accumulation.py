"""Accumulation weighs each micro-batch by the items its loss averages over (tokens, for a loss that
ignores padding), so a window of micro-batches gives the gradient of one big batch of the same items."""

from dataclasses import dataclass

import pytest
import torch
from conftest import REPO
from torch import nn

from runner.training.batches import ModelLoss, loss_items
from runner.training.precision import resolve_precision
from runner.training.step import Learner, train_step
from runner.training.validation import evaluate

CPU = torch.device("cpu")
EXAMPLE = REPO / "examples" / "causal_lm"
# The case: lines of 5 and 25 characters, 4 and 24 predicted tokens.
SHORT, LONG = torch.arange(1, 6), torch.arange(1, 26) % 50 + 1


@pytest.fixture
def causal_lm(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import causal_lm

    return causal_lm


def gradients_of_one_step(model: nn.Module, loss_fn, window: list) -> tuple[dict, float]:
    """The gradient the step applied (SGD at rate 1: the weights' change), and its logged loss."""
    before = {name: value.detach().clone() for name, value in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    learner = Learner(model, loss_fn, optimizer, resolve_precision("fp32", CPU), CPU, False, "labels")
    result = train_step(learner, window, clip_norm=None)
    return {
        name: before[name] - value.detach() for name, value in model.named_parameters()
    }, result.loss.item()


def assert_same_gradients(window_grads: dict, big_grads: dict) -> None:
    for name, grad in big_grads.items():
        torch.testing.assert_close(window_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def twin_models(make) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    first, second = make(), make()
    second.load_state_dict(first.state_dict())
    return first.train(), second.train()


def tiny_lm(causal_lm) -> nn.Module:
    return causal_lm.TinyCausalLM(vocab_size=53, max_positions=32, width=16, heads=2, layers=1)


def test_a_window_of_padded_lm_batches_is_one_big_batch_with_the_models_own_loss(causal_lm):
    """loss=from_model on a transformers-style batch: the labels that are not -100 are counted."""
    collate = causal_lm.PaddingCollator()
    lines = [{"input_ids": SHORT}, {"input_ids": LONG}]
    window_model, big_model = twin_models(lambda: tiny_lm(causal_lm))
    window, window_loss = gradients_of_one_step(
        window_model, ModelLoss(), [collate(lines[:1]), collate(lines[1:])]
    )
    big, big_loss = gradients_of_one_step(big_model, ModelLoss(), [collate(lines)])
    assert_same_gradients(window, big)
    assert window_loss == pytest.approx(big_loss, rel=1e-5)  # train/loss: the window's mean per token


@dataclass
class SaysItsItems:
    loss: torch.Tensor
    num_items_in_batch: torch.Tensor


class ShiftsItsOwnLabels(nn.Module):
    """A model whose labels are its inputs (the shift is inside, as in transformers), so the batch
    cannot show what the loss averages over: every token but the first of each line. It says so."""

    def __init__(self, causal_lm):
        super().__init__()
        self.lm = tiny_lm(causal_lm)

    def forward(self, input_ids, lengths):
        labels = input_ids.clone()
        labels[torch.arange(input_ids.shape[1])[None, :] >= lengths[:, None]] = -100
        mask = (labels != -100).long()
        output = self.lm(input_ids=input_ids, attention_mask=mask, labels=labels)
        return SaysItsItems(output.loss, (labels[:, 1:] != -100).sum())


def padded(lines: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = nn.utils.rnn.pad_sequence(lines, batch_first=True)
    return ids, torch.tensor([len(line) for line in lines])


def test_a_model_that_says_how_many_items_its_loss_averaged_is_weighed_by_that(causal_lm):
    window_model, big_model = twin_models(lambda: ShiftsItsOwnLabels(causal_lm))
    window, window_loss = gradients_of_one_step(
        window_model, ModelLoss(), [padded([SHORT]), padded([LONG]), padded([SHORT, SHORT])]
    )
    big, big_loss = gradients_of_one_step(big_model, ModelLoss(), [padded([SHORT, LONG, SHORT, SHORT])])
    assert_same_gradients(window, big)
    assert window_loss == pytest.approx(big_loss, rel=1e-5)


class TokenScores(nn.Module):
    """Token ids (N, T) to scores (N, V, T), the layout nn.CrossEntropyLoss takes for sequences."""

    def __init__(self):
        super().__init__()
        self.embedding, self.head = nn.Embedding(60, 8), nn.Linear(8, 60)

    def forward(self, tokens):
        return self.head(torch.tanh(self.embedding(tokens))).transpose(1, 2)


def test_a_window_of_pairs_with_ignored_targets_is_one_big_batch():
    """A class-index loss that ignores -100 (every padded sequence pair): targets that count, counted."""
    targets = [LONG.clone(), LONG.clone(), LONG.clone()]
    targets[0][4:] = -100  # 4 tokens, then padding
    targets[2][10:] = -100
    inputs = torch.stack([LONG.flip(0)] * 3)
    window_model, big_model = twin_models(TokenScores)
    micro_batches = [(inputs[i : i + 1], targets[i][None]) for i in range(3)]
    window, window_loss = gradients_of_one_step(window_model, nn.CrossEntropyLoss(), micro_batches)
    big, big_loss = gradients_of_one_step(big_model, nn.CrossEntropyLoss(), [(inputs, torch.stack(targets))])
    assert_same_gradients(window, big)
    assert window_loss == pytest.approx(big_loss, rel=1e-5)


def test_sample_mean_pairs_weigh_exactly_as_by_samples():
    """Without ignored targets the counts are the samples: the update is the one sample shares give,
    bit for bit (a short last micro-batch included)."""
    torch.manual_seed(0)
    inputs, targets = torch.randn(7, 5), torch.randint(3, (7,))
    window_model, by_hand = twin_models(lambda: nn.Linear(5, 3))
    micro_batches = [(inputs[:3], targets[:3]), (inputs[3:6], targets[3:6]), (inputs[6:], targets[6:])]
    gradients_of_one_step(window_model, nn.CrossEntropyLoss(), micro_batches)
    for x, y in micro_batches:
        (nn.functional.cross_entropy(by_hand(x), y) * (len(y) / 7)).backward()
    with torch.no_grad():
        for parameter in by_hand.parameters():
            parameter -= parameter.grad
    for mine, theirs in zip(window_model.parameters(), by_hand.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_validation_weighs_each_batch_by_the_items_the_model_says(causal_lm):
    """val/loss over batches of 4, 24 and 4 predicted tokens is the mean over all 32 of them."""
    model = twin_models(lambda: ShiftsItsOwnLabels(causal_lm))[0]
    batches = [padded([SHORT]), padded([LONG]), padded([SHORT])]
    values = evaluate(model, batches, ModelLoss(), CPU, resolve_precision("fp32", CPU), False, {}, "labels")
    with torch.no_grad():
        whole = model.eval()(*padded([SHORT, LONG, SHORT])).loss.item()
    assert values["val/loss"] == pytest.approx(whole, rel=1e-5)


def test_class_weights_weigh_each_micro_batch_by_its_targets_weights():
    """A class-weighted loss averages over the weights of its targets: a window of such batches is one
    big batch, and so is validation over them."""
    weights = torch.tensor([0.2, 1.0, 3.0])
    loss_fn = nn.CrossEntropyLoss(weight=weights)
    torch.manual_seed(0)
    inputs, targets = torch.randn(6, 5), torch.tensor([0, 0, 0, 2, 1, 2])
    window_model, big_model = twin_models(lambda: nn.Linear(5, 3))
    micro_batches = [(inputs[:3], targets[:3]), (inputs[3:], targets[3:])]
    window, window_loss = gradients_of_one_step(window_model, loss_fn, micro_batches)
    big, big_loss = gradients_of_one_step(big_model, loss_fn, [(inputs, targets)])
    assert_same_gradients(window, big)
    assert window_loss == pytest.approx(big_loss, rel=1e-5)
    precision = resolve_precision("fp32", CPU)
    values = evaluate(big_model, micro_batches, loss_fn, CPU, precision, False, {}, "labels")
    with torch.no_grad():
        assert values["val/loss"] == pytest.approx(loss_fn(big_model(inputs), targets).item(), rel=1e-5)


def test_a_micro_batch_whose_targets_are_all_ignored_adds_nothing():
    """Its own mean is 0/0; the window's gradient and logged loss are those of the other micro-batches."""
    torch.manual_seed(0)
    inputs, targets = torch.randn(4, 5), torch.tensor([0, 2, -100, -100])
    window_model, big_model = twin_models(lambda: nn.Linear(5, 3))
    micro_batches = [(inputs[:2], targets[:2]), (inputs[2:], targets[2:])]
    window, window_loss = gradients_of_one_step(window_model, nn.CrossEntropyLoss(), micro_batches)
    big, big_loss = gradients_of_one_step(big_model, nn.CrossEntropyLoss(), [(inputs, targets)])
    assert_same_gradients(window, big)
    assert window_loss == pytest.approx(big_loss, rel=1e-6)


def test_a_first_micro_batch_of_padding_alone_adds_nothing_to_what_the_model_says(causal_lm):
    """A model that says its items, and says 0 for the window's first micro-batch (a one-token line
    predicts nothing): the window is still the big batch, and the step is applied."""
    window_model, big_model = twin_models(lambda: ShiftsItsOwnLabels(causal_lm))
    nothing = torch.tensor([7])
    window, window_loss = gradients_of_one_step(
        window_model, ModelLoss(), [padded([nothing]), padded([SHORT]), padded([LONG])]
    )
    big, big_loss = gradients_of_one_step(big_model, ModelLoss(), [padded([nothing, SHORT, LONG])])
    assert_same_gradients(window, big)
    assert window_loss == pytest.approx(big_loss, rel=1e-5)


def test_a_validation_batch_of_padding_alone_leaves_val_loss_the_mean_over_the_others(causal_lm):
    """Its own mean is 0/0: val/loss is the mean over the other batches' items, not NaN, whether the
    targets show the count or the model says it."""
    torch.manual_seed(0)
    inputs, targets = torch.randn(4, 5), torch.tensor([0, 2, -100, -100])
    model, precision = nn.Linear(5, 3), resolve_precision("fp32", CPU)
    pairs = [(inputs[:2], targets[:2]), (inputs[2:], targets[2:])]
    values = evaluate(model, pairs, nn.CrossEntropyLoss(), CPU, precision, False, {}, "labels")
    with torch.no_grad():
        assert values["val/loss"] == pytest.approx(nn.CrossEntropyLoss()(model(inputs), targets).item())
    lm = twin_models(lambda: ShiftsItsOwnLabels(causal_lm))[0]
    batches = [padded([torch.tensor([7])]), padded([SHORT]), padded([LONG])]
    values = evaluate(lm, batches, ModelLoss(), CPU, precision, False, {}, "labels")
    with torch.no_grad():
        whole = lm.eval()(*padded([torch.tensor([7]), SHORT, LONG])).loss.item()
    assert values["val/loss"] == pytest.approx(whole, rel=1e-5)


def test_one_micro_batch_on_one_process_is_not_counted(monkeypatch):
    """Weights matter only across micro-batches or processes: a window of one reads none of its targets
    (on a GPU each such read would be a host sync every step); windows of several count each one."""
    import runner.training.step as step

    counted = []

    def counting(batch, loss_fn, target_key):
        counted.append(batch)
        return loss_items(batch, loss_fn, target_key)

    monkeypatch.setattr(step, "loss_items", counting)
    torch.manual_seed(0)
    inputs, targets = torch.randn(4, 5), torch.tensor([0, 2, 1, -100])
    model = nn.Linear(5, 3)
    gradients_of_one_step(model, nn.CrossEntropyLoss(), [(inputs, targets)])
    assert counted == []
    gradients_of_one_step(
        model, nn.CrossEntropyLoss(), [(inputs[:2], targets[:2]), (inputs[2:], targets[2:])]
    )
    assert len(counted) == 2


def transformers_collated(lines: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """As transformers' DataCollatorForLanguageModeling(mlm=False) builds a batch: the labels are the
    input ids, -100 at padding only (the first token too is a label, which the model's shift skips)."""
    input_ids = nn.utils.rnn.pad_sequence(lines, batch_first=True)
    attention_mask = (
        torch.arange(input_ids.shape[1])[None, :] < torch.tensor([len(x) for x in lines])[:, None]
    )
    labels = input_ids.masked_fill(~attention_mask, -100)
    return {"input_ids": input_ids, "attention_mask": attention_mask.long(), "labels": labels}


def test_transformers_style_causal_lm_labels_count_the_tokens_the_shifted_loss_scores(causal_lm):
    """Labels equal to the input ids (the first token not -100): the loss scores 4 and 24 of 5 and 25
    labels. A window is the big batch, and val/loss the mean over every scored token."""
    window_model, big_model = twin_models(lambda: tiny_lm(causal_lm))
    window, window_loss = gradients_of_one_step(
        window_model, ModelLoss(), [transformers_collated([SHORT]), transformers_collated([LONG])]
    )
    big, big_loss = gradients_of_one_step(big_model, ModelLoss(), [transformers_collated([SHORT, LONG])])
    assert_same_gradients(window, big)
    assert window_loss == pytest.approx(big_loss, rel=1e-5)
    batches = [transformers_collated([SHORT]), transformers_collated([LONG]), transformers_collated([SHORT])]
    precision = resolve_precision("fp32", CPU)
    values = evaluate(big_model, batches, ModelLoss(), CPU, precision, False, {}, "labels")
    with torch.no_grad():
        whole = big_model.eval()(**transformers_collated([SHORT, LONG, SHORT])).loss.item()
    assert values["val/loss"] == pytest.approx(whole, rel=1e-5)


def test_one_micro_batch_on_one_process_reads_no_count_the_model_says(causal_lm):
    """A model that says its items, one micro-batch on one process: nothing to weigh, so the count is
    never read (a read would be a host sync every step). Here it cannot be read (a meta tensor): the
    step runs, its loss the model's own."""

    class SaysUnreadable(ShiftsItsOwnLabels):
        def forward(self, input_ids, lengths):
            return SaysItsItems(super().forward(input_ids, lengths).loss, torch.empty((), device="meta"))

    model, twin = twin_models(lambda: SaysUnreadable(causal_lm))
    with torch.no_grad():
        expected = twin(*padded([SHORT, LONG])).loss.item()
    _, loss = gradients_of_one_step(model, ModelLoss(), [padded([SHORT, LONG])])
    assert loss == expected
