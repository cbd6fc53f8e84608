"""Token-exact chat deltas and trajectories: what the learner trains on is what the model saw."""

from __future__ import annotations

import json

import pytest

from agents.chat import ChatTemplate, ChatTemplateError
from agents.models import ScriptedModel
from agents.protocols import SamplingParams
from agents.react import run_episode
from agents.trajectory import FORMAT_VERSION, Trajectory, Turn, load_jsonl, write_predictions
from swe_gym.tools.parsing import ToolCall, format_action

SUBMIT = format_action(ToolCall("submit"))

MESSAGES = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "The add() function is wrong."},
]


@pytest.fixture(params=["smollm2", "tiny"])
def tokenizer(request, smollm2_tokenizer, tiny_tokenizer):
    return smollm2_tokenizer if request.param == "smollm2" else tiny_tokenizer


def _full(tok, messages):
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def test_deltas_equal_full_render_when_model_stops_on_end_of_turn(tokenizer):
    ct = ChatTemplate(tokenizer)
    ids = ct.initial_ids(MESSAGES)
    assert ids == _full(tokenizer, MESSAGES)
    history = list(MESSAGES)
    for reply, obs in [("Let me look.", "file.py\nREADME"), ("héllo ✓", "(no output)")]:
        completion = tokenizer.encode(reply, add_special_tokens=False) + ct.end_of_turn_ids[:1]
        ids += completion + ct.turn_filler(completion) + ct.observation_delta_ids(obs)
        history += [{"role": "assistant", "content": reply}, {"role": "user", "content": obs}]
        # These two templates are append-only, so the incremental ids must match a full render.
        assert ids == _full(tokenizer, history)


def test_length_cut_completion_gets_the_whole_end_of_turn(tokenizer):
    ct = ChatTemplate(tokenizer)
    cut = tokenizer.encode("an unfinished tho", add_special_tokens=False)
    assert ct.turn_filler(cut) == ct.end_of_turn_ids
    stopped = cut + ct.end_of_turn_ids[:1]
    assert ct.turn_filler(stopped) == ct.end_of_turn_ids[1:]


def test_smollm2_end_of_turn_is_im_end_newline(smollm2_tokenizer):
    ct = ChatTemplate(smollm2_tokenizer)
    assert smollm2_tokenizer.decode(ct.end_of_turn_ids) == "<|im_end|>\n"


def test_delta_does_not_depend_on_history(smollm2_tokenizer):
    ct = ChatTemplate(smollm2_tokenizer)
    a = ct.observation_delta_ids("same observation")
    ct.initial_ids(MESSAGES)  # rendering something else in between changes nothing
    assert ct.observation_delta_ids("same observation") == a


def test_tokenizer_without_template_is_refused(tiny_tokenizer):
    import copy

    tok = copy.deepcopy(tiny_tokenizer)
    tok.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat_template"):
        ChatTemplate(tok)


def _episode_script(tok_budget_reply: str) -> list:
    return [
        "I will look around first.\n```bash\nls\n```",
        tok_budget_reply,  # cut by max_new_tokens: unclosed fence, an invalid action
        "",  # empty reply: invalid
        "Now the readme.\n```bash\nhead -n 3 README.md\n```",
        SUBMIT,
    ]


def test_model_was_conditioned_on_the_trajectory_prefix(tokenizer, make_env, recording):
    """The invariant the learner relies on, over a multi-turn episode with faults in it."""
    long_reply = "```bash\necho " + "x" * 400 + "\n```"
    model = recording(ScriptedModel(_episode_script(long_reply), tokenizer=tokenizer))
    traj = run_episode(
        make_env(), model, agent_kwargs={"params": SamplingParams(max_new_tokens=100)}
    )
    assert traj.finish_reason == "submitted", traj.error
    assert traj.token_exact
    assert len(traj.turns) == len(model.seen) == 5
    ids, mask, logprobs = traj.to_sample_arrays()
    for t, conv in enumerate(model.seen):
        assert conv.token_ids == traj.conditioned_ids(t)
        assert conv.token_ids == ids[: len(conv.token_ids)]
    assert [t.invalid_action for t in traj.turns] == [False, True, True, False, False]
    assert traj.turns[1].completion_finish_reason == "length"
    # The cut turn's missing end-of-turn ids open turn 2's delta, with loss mask 0.
    ct = ChatTemplate(tokenizer)
    assert traj.turns[2].prompt_delta_ids[: len(ct.end_of_turn_ids)] == ct.end_of_turn_ids
    # Mask: exactly the completion tokens; log-probs line up with ids.
    assert len(ids) == len(mask) == len(logprobs)
    assert sum(mask) == sum(len(t.completion_ids) for t in traj.turns)
    pos = 0
    for t in traj.turns:
        pos += len(t.prompt_delta_ids)
        assert mask[pos - len(t.prompt_delta_ids) : pos] == [0] * len(t.prompt_delta_ids)
        assert ids[pos : pos + len(t.completion_ids)] == t.completion_ids
        assert mask[pos : pos + len(t.completion_ids)] == [1] * len(t.completion_ids)
        pos += len(t.completion_ids)
    # RFT masks the invalid turns out.
    _, rft_mask, _ = traj.to_sample_arrays(mask_invalid=True)
    valid = sum(len(t.completion_ids) for t in traj.turns if not t.invalid_action)
    assert sum(rft_mask) == valid < sum(mask)


def _toy() -> Trajectory:
    return Trajectory(
        task_id="t-1",
        turns=[
            Turn(
                prompt_delta_ids=[1, 2, 3],
                completion_ids=[4, 5],
                completion_logprobs=[-0.1, -0.2],
                action="a",
                observation="o",
                tool="bash",
            ),
            Turn(
                prompt_delta_ids=[6],
                completion_ids=[7],
                completion_logprobs=[-0.3],
                action="b",
                invalid_action=True,
                invalid_reason="no_command",
            ),
        ],
        reward=1.0,
        resolved=True,
        patch="diff --git a/x b/x\n",
        report={"resolved": True},
        finish_reason="submitted",
        model="scripted",
        token_exact=True,
    )


def test_sample_arrays_of_a_known_trajectory():
    ids, mask, lp = _toy().to_sample_arrays()
    assert ids == [1, 2, 3, 4, 5, 6, 7]
    assert mask == [0, 0, 0, 1, 1, 0, 1]
    assert lp == [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, -0.3]
    assert _toy().to_sample_arrays(mask_invalid=True)[1] == [0, 0, 0, 1, 1, 0, 0]


def test_jsonl_round_trip_and_version(tmp_path):
    trajs = [_toy(), _toy()]
    trajs[1].turns[0].action = "bad \udcff decode"  # a lone surrogate must not break the file
    path = Trajectory.save_jsonl(trajs, tmp_path / "t.jsonl")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert all(r["format_version"] == FORMAT_VERSION for r in rows)
    back = load_jsonl(path)
    assert back[0] == trajs[0]
    assert back[1].turns[0].action == "bad \udcff decode"
    rows[0]["format_version"] = 99
    (tmp_path / "v99.jsonl").write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(ValueError, match="format_version 99"):
        load_jsonl(tmp_path / "v99.jsonl")


def test_predictions_file(tmp_path):
    path = write_predictions([_toy()], tmp_path / "preds.jsonl")
    row = json.loads(path.read_text())
    assert row == {
        "instance_id": "t-1",
        "model_name_or_path": "scripted",
        "model_patch": "diff --git a/x b/x\n",
    }


def test_text_only_trajectory_refuses_sample_arrays():
    traj = _toy()
    traj.token_exact = False
    with pytest.raises(ValueError, match="not token-exact"):
        traj.to_sample_arrays()
