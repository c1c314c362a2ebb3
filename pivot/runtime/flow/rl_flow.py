"""The RL sample flow on rank 0: prompts -> rollout sequences -> judge sequences -> rewards ->
training batches. Pure bookkeeping (no torch, no sockets): the controller feeds it engine
outputs and asks it for new sequences; the sample buffer enforces staleness and exactly-once.

Sequence ids are global and never reused, so a stale or duplicate output is recognised by id.
A rollout sequence's version is the oldest policy version that generated any of its tokens
(rollout replicas update weights between engine steps; a sequence that spans an update is
judged by its oldest tokens, the conservative choice for the staleness bound). Engines label each
range of output tokens with the version that made it (`Output.versions`, a partial's
`Request.versions`: a `VersionRanges`); an Output's `weights_version` is the oldest over all its
tokens (`VersionRanges.oldest`), and a sequence's version here the oldest over its attempts.

With `--tools.config`, a rollout is an episode of turns with tool calls between them: `Episodes`
(pivot/runtime/flow/episodes.py) keeps them, each turn is a rollout sequence, and `poll_episodes`
(the controller's tick) hands back the next turns and the finished episodes' judgings.

`RLFlow` holds DAPO's dynamic sampling as a part (`DynamicSampling`,
pivot/runtime/flow/dynamic_sampling.py) and acts on its answers; what it hands the trainer and the logs
is computed in pivot/runtime/flow/flow_reports.py over the inputs the flow passes in.
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from pivot.config import PivotConfig
from pivot.engine import Output, Request, SamplingParams
from pivot.faults import happens
from pivot.model import TextTokenizer
from pivot.rl.batch import TrainBatch
from pivot.rl.buffer import Key, Outcome, SampleBuffer
from pivot.rl.data import Prompt, PromptCursor
from pivot.rl.evaluation import EvalResult, EvalRun
from pivot.rl.plugins import CheckedVerifier, accuracy, load_verifier
from pivot.rl.reward import GenRMScorer, parse_verdict, total_reward
from pivot.runtime.flow.dynamic_sampling import DynamicSampling
from pivot.runtime.flow.episodes import Episode, Episodes, ToolRunnerLike
from pivot.runtime.flow.flow_reports import FlowStats, flow_metrics, step_batch
from pivot.runtime.flow.sequences import Response, SeqInfo, SequenceShaper
from pivot.sched.records import step_major_id

EVAL_ID_OFFSET = 1 << 39  # below STEP_ID_SHIFT: a run's counter never reaches it

_PROMPT_CACHE = 4096  # tokenized prompts kept: a few steps' worth, each used G + 1 times


RETRY_TEMPERATURE = 0.6
"""The least temperature an unparsable verdict's retry samples at (`reward.retry_unparsable`):
Qwen3's advice for its thinking mode, and enough that a greedy judge does not repeat itself."""


@dataclass
class RLFlow:
    cfg: PivotConfig
    cursor: PromptCursor
    policy_tok: TextTokenizer
    genrm_tok: TextTokenizer
    buffer: SampleBuffer
    staleness: int
    judge_template: str  # the run's, resolved (pivot.tiny.task.judge_template): the GenRM's prompt
    heldout: list[Prompt] = field(default_factory=list)
    next_step: int = 0  # next step whose prompts are not submitted yet
    seqs: dict[int, SeqInfo] = field(default_factory=dict)
    verifiable: dict[Key, float] = field(default_factory=dict)  # R_verifiable per sample
    # a dict verifier result's other keys (not checkpointed)
    reward_extra: dict[Key, dict] = field(default_factory=dict)
    judgings: dict[Key, int] = field(default_factory=dict)  # GenRM verdicts received per sample
    # the judge's last output and the score parsed from it, per sample, for samples.jsonl (not
    # checkpointed: a sample judged before a restart has its reward, not the judge's words)
    judge_outputs: dict[Key, tuple[str, float]] = field(default_factory=dict)
    stats: FlowStats = field(default_factory=FlowStats)
    evals: dict[int, EvalRun] = field(default_factory=dict)  # in flight, by step
    eval_results: list[EvalResult] = field(default_factory=list)  # finished, not yet logged
    # step -> [right, responses] over every rollout, dropped groups' too (not checkpointed)
    sampled: dict[int, list[float]] = field(default_factory=dict)
    # an episode's tools' own reward and, with tools.judge_sees=answer, its last turn, per sample
    # until it is rewarded or judged (not checkpointed: a restart regenerates open episodes)
    tool_rewards: dict[Key, float] = field(default_factory=dict)
    answers: dict[Key, str] = field(default_factory=dict)
    # built from the config (__post_init__)
    scorer: GenRMScorer = field(init=False, repr=False)
    verify: CheckedVerifier = field(init=False, repr=False)
    sampling: DynamicSampling = field(init=False, repr=False)  # DAPO's, `train.filter_groups`
    # multi-turn episodes (`tools.config`); the runner is built from the config unless given
    tool_runner: ToolRunnerLike | None = field(default=None, repr=False)
    shaper: SequenceShaper | None = field(default=None, repr=False)
    episodes: Episodes | None = field(init=False, default=None, repr=False)
    _next_id: int = 0
    # tokenized prompts by text and messages
    _policy_ids: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._tool_schemas: list[dict] | None = None
        if self.cfg.tools.enabled:
            from pivot.tools.registry import load_tools, tool_schemas
            from pivot.tools.runner import ToolRunner

            t = self.cfg.tools
            tools = load_tools(t.config)
            self._tool_schemas = tool_schemas(tools)
            if self.tool_runner is None:
                self.tool_runner = ToolRunner(
                    tools,
                    timeout_s=t.timeout_s,
                    max_in_flight=t.max_in_flight,
                    max_response_chars=t.max_response_chars,
                )
            self.episodes = Episodes(
                t,
                self.policy_tok,
                self.tool_runner,
                self._tool_schemas,
                self.cfg.rollout.max_new_tokens,
            )
        reward = self.cfg.reward
        self.scorer = GenRMScorer(
            dataclasses.replace(reward, judge_template=self.judge_template, judge_template_file="")
        )
        self.verify = CheckedVerifier(load_verifier(reward.verifier))
        self.sampling = DynamicSampling(self.cfg.train, reward.w_genrm != 0, self.buffer)
        limit = self.cfg.rollout.max_prompt_tokens
        self.heldout = [p for p in self.heldout if len(self.policy_ids(p)) <= limit]
        data = self.cursor.dataset
        if not any(
            len(self.policy_ids(p)) <= limit for p in data.prompts
        ):  # fill() would wait for one forever
            shortest = min(len(self.policy_ids(p)) for p in data.prompts)
            raise ValueError(
                f"rollout.max_prompt_tokens={limit}: no prompt of {data.source or 'the dataset'} fits "
                f"(the shortest has {shortest} tokens)"
            )
        ro, rm = self.cfg.rollout, self.cfg.reward
        self._ro_params = dict(
            temperature=ro.temperature,
            top_p=ro.top_p,
            top_k=ro.top_k,
            max_new_tokens=ro.max_new_tokens,
        )
        self._rm_params = dict(temperature=rm.temperature, max_new_tokens=rm.max_new_tokens)

    def _new_seq(
        self, role: str, key: Key, prompt_ids: list[int], params: dict, **extra: Any
    ) -> SeqInfo:
        # an evaluation's sequences queue after every rollout of their step, its dynamic
        # sampling's replacements included (the step's training waits for both)
        sid = step_major_id(
            key[0], self._next_id + (EVAL_ID_OFFSET if extra.get("eval_step", -1) >= 0 else 0)
        )
        self._next_id += 1
        if self.shaper is not None:
            params = self.shaper.params(role, key, params)
        seed = zlib.crc32(repr((self.cfg.seed, role, key, sid)).encode())  # stable across processes
        info = SeqInfo(
            sid, role, key, Request(sid, prompt_ids, SamplingParams(seed=seed, **params)), **extra
        )
        self.seqs[sid] = info
        return info

    # ---- prompts as token ids ---------------------------------------------------------------
    def policy_ids(self, prompt: Prompt) -> list[int]:
        """The policy's input: the policy's chat template over the prompt's chat messages when it has
        one (every prompt with --data.chat-template, plain text as one user message), else the
        prompt's text (always with --data.raw-prompts)."""
        key = f"{prompt.text}\0{prompt.messages}"
        ids = self._policy_ids.get(key)
        if ids is None:
            if len(self._policy_ids) >= _PROMPT_CACHE:
                self._policy_ids.clear()
            data = self.cfg.data
            templated = data.chat_template or (
                prompt.messages is not None and self.policy_tok.chat_template is not None
            )
            if data.raw_prompts or not templated:
                ids = self.policy_tok.encode(prompt.text)
            else:
                ids = self.policy_tok.apply_chat_template(
                    self._messages(prompt), add_generation_prompt=True, tools=self._tool_schemas
                )
            self._policy_ids[key] = ids
        return list(ids)

    @staticmethod
    def _messages(prompt: Prompt) -> list[dict]:
        return list(prompt.messages or [{"role": "user", "content": prompt.text}])

    def judge_ids(self, judge_text: str) -> list[int]:
        """The GenRM's input: the filled judge template, inside the GenRM's chat template when it
        has one and --reward.chat-template is on (the default)."""
        reward = self.cfg.reward
        if not (reward.chat_template and self.genrm_tok.chat_template):
            return self.genrm_tok.encode(judge_text)
        return self.genrm_tok.apply_chat_template(
            [{"role": "user", "content": judge_text}],
            add_generation_prompt=True,
            enable_thinking=reward.enable_thinking,
        )

    def judge_output(self, out: Output) -> str:
        """The judge's text as the verdict parser must see it: a chat template that opens the
        thinking block in the prompt (Qwen3 with thinking) gets its `<think>` put back in front."""
        text = self.genrm_tok.decode(out.output_ids)
        tail = self.genrm_tok.decode(list(out.prompt_ids[-4:]))
        return "<think>" + text if tail.rfind("<think>") > tail.rfind("</think>") else text

    # ---- rollout side ----------------------------------------------------------------------
    def fill(self, version: int, total_steps: int) -> list[SeqInfo]:
        """Rollout sequences for every step that `version` may generate (staleness bound)."""
        out: list[SeqInfo] = []
        b = self.cfg.train.batch_prompts
        while self.next_step < total_steps and self.next_step - version <= self.staleness:
            prompts = self._next_prompts(b + self.sampling.spare_groups())
            for key in self.buffer.add_prompts(self.next_step, prompts, keep=b):
                out.append(self.rollout_seq(key))
            self.next_step += 1
        return out

    def _next_prompts(self, n: int) -> list[Prompt]:
        prompts: list[Prompt] = []
        while len(prompts) < n:
            for p in self.cursor.next_batch(n - len(prompts)):
                if len(self.policy_ids(p)) <= self.cfg.rollout.max_prompt_tokens:
                    prompts.append(p)
                else:
                    self.stats.prompts_skipped_too_long += 1
        return prompts

    def rollout_seq(self, key: Key) -> SeqInfo:
        sample = self.buffer.sample(key)
        ids = self.policy_ids(sample.prompt)
        if self.episodes is not None:
            self._open_episode(key, sample.prompt, ids)
        return self._new_seq("rollout", key, ids, self._ro_params)

    def _open_episode(self, key: Key, prompt: Prompt, ids: list[int], eval_step: int = -1) -> None:
        assert self.episodes is not None
        kwargs = (prompt.extra_info or {}).get("tools_kwargs") or {}
        self.episodes.open(key, ids, self._messages(prompt), kwargs, eval_step)

    # ---- episodes (tools.config) -------------------------------------------------------------
    def poll_episodes(self) -> list[SeqInfo]:
        """The next turns of episodes whose tool responses came back, and what follows the
        episodes that ended (a judging, a regeneration); nothing without tools."""
        if self.episodes is None:
            return []
        going, ended = self.episodes.poll()
        out = [self._next_turn(ep) for ep in going]
        for ep in ended:
            if ep.eval_step >= 0:
                self._eval_scored(ep.key, ep.eval_step, ep.response_ids, ep.version)
            else:
                out += self._responded(ep.key, self._episode_response(ep))
        return out

    def _next_turn(self, ep: Episode) -> SeqInfo:
        assert self.episodes is not None
        params = {**self._ro_params, "max_new_tokens": self.episodes.budget(ep)}
        if ep.eval_step >= 0:
            params["temperature"] = 0.0
        info = self._new_seq(
            "rollout", ep.key, ep.prompt_and_response, params, eval_step=ep.eval_step
        )
        info.version = ep.version
        return info

    def _episode_response(self, ep: Episode) -> Response:
        judged = ep.last_turn if self.cfg.tools.judge_sees == "answer" else None
        return Response(
            ids=ep.response_ids,
            logprobs=ep.logprobs,
            version=ep.version,
            prompt_ids=ep.prompt_ids,
            version_starts=ep.version_starts,
            mask=ep.mask,
            turns=ep.turns,
            tool_calls=ep.tool_calls,
            tool_errors=ep.tool_errors,
            tool_reward=ep.tool_reward,
            judged_text=judged,
        )

    def on_rollout(self, out: Output) -> list[SeqInfo]:
        """A finished rollout: record it; returns the judge sequence (or a regeneration). A turn
        of an episode goes to `Episodes`, and its sample is recorded when the episode ends."""
        info = self.seqs.pop(out.id)
        version = info.oldest(out.weights_version)
        self.stats.tokens_rollout += len(out.prompt_ids) + len(out.output_ids)
        if self.episodes is not None:
            self.episodes.on_turn(info.key, out, version)
            return []
        response = Response(
            ids=list(out.output_ids),
            logprobs=list(out.output_logprobs),
            version=version,
            prompt_ids=list(out.prompt_ids),
            version_starts=list(out.versions.starts),
        )
        return self._responded(info.key, response)

    def _responded(self, key: Key, r: Response) -> list[SeqInfo]:
        """A sample's whole response (one rollout, or an episode's turns): the buffer's, then
        its verifiable reward and its judging."""
        text = self.policy_tok.decode(r.ids)
        outcome = self.buffer.on_response(
            key,
            r.ids,
            r.logprobs,
            text,
            r.version,
            prompt_ids=r.prompt_ids,
            version_starts=r.version_starts,
            response_mask=r.mask,
            episode=(r.turns, r.tool_calls, r.tool_errors),
        )
        if outcome in (Outcome.DUPLICATE, Outcome.SURPLUS):  # counted by the buffer
            return []
        if outcome == Outcome.STALE:
            self.stats.stale_regenerated += 1
            return [self.rollout_seq(key)]
        self.stats.rollouts_finished += 1
        sample = self.buffer.sample(key)
        r_v = self._verify(key, text, sample.prompt)
        if r.tool_reward:
            self.tool_rewards[key] = r.tool_reward
        if r.judged_text is not None:
            self.answers[key] = r.judged_text
        tally = self.sampled.setdefault(key[0], [0.0, 0.0])
        tally[0] += accuracy(r_v, self.reward_extra.get(key, {}))
        tally[1] += 1
        if self.cfg.reward.w_genrm == 0:  # no judge: the verifiable reward is the reward
            return self._rewarded(key, self._total(key, r_v, None))
        if not self.sampling.filters_before_judging():
            return [self.judge_seq(key, self._judged_text(key), r_v)]
        return self._judge_group_once_verified(key[0], key[1])

    def _judged_text(self, key: Key) -> str:
        """What the judge reads of sample `key`'s response: its text, or with tools.judge_sees
        =answer its episode's last turn (the whole text after a restart, which kept no turns)."""
        return self.answers.pop(key, None) or self.buffer.sample(key).text

    def _total(self, key: Key, r_v: float, r_g: float | None) -> float:
        """The sample's reward: the reward options' mix, plus the tools' own reward weighted by
        tools.reward_weight."""
        tools = self.cfg.tools.reward_weight * self.tool_rewards.pop(key, 0.0)
        return total_reward(r_v, r_g, self.cfg.reward) + tools

    def _verify(self, key: Key, response: str, prompt: Prompt) -> float:
        score = self.verify.check(response, prompt)
        self.verifiable[key] = score.value
        if score.extras:
            self.reward_extra[key] = score.extras
        return score.value

    def _rewarded(self, key: Key, reward: float) -> list[SeqInfo]:
        accepted = (
            self.buffer.on_reward(key, reward) == Outcome.ACCEPTED
        )  # duplicates counted there
        if accepted and self.sampling.drops_rewarded(key[0], key[1], self.verifiable):
            return self._replace(key[0], key[1])
        return []

    # ---- dynamic sampling's answers (pivot.runtime.flow.dynamic_sampling) ------------------------
    def _replace(self, step: int, prompt_id: int) -> list[SeqInfo]:
        """Drop a uniform group; a fresh prompt's group takes its place when the step's
        remaining groups (spares included) fall short of its batch."""
        for g in range(self.buffer.group_size):
            self.tool_rewards.pop((step, prompt_id, g), None)
            self.answers.pop((step, prompt_id, g), None)
            self.verifiable.pop((step, prompt_id, g), None)
            self.judgings.pop((step, prompt_id, g), None)
            self.judge_outputs.pop((step, prompt_id, g), None)
            self.reward_extra.pop((step, prompt_id, g), None)
        self.buffer.drop_group(step, prompt_id)
        if self.buffer.live_groups(step) >= self.buffer.keep(step):
            return []
        keys = self.buffer.add_group(step, self._next_prompts(1)[0])
        return [self.rollout_seq(k) for k in keys]

    def _judge_group_once_verified(self, step: int, prompt_id: int) -> list[SeqInfo]:
        """Nothing until the group's G responses are all in; then the group is dropped and replaced
        if dynamic sampling drops it, else its unrewarded samples are judged. Called for the
        group's last response (or once per group on restore), so each is judged once."""
        keys = [(step, prompt_id, g) for g in range(self.buffer.group_size)]
        samples = [self.buffer.sample(k) for k in keys]
        if any(s.response_ids is None for s in samples):
            return []
        if self.sampling.drops(step, [self.verifiable.get(k, 0.0) for k in keys]):
            return self._replace(step, prompt_id)
        return [
            self.judge_seq(s.key, self._judged_text(s.key), self.verifiable.get(s.key, 0.0))
            for s in samples
            if s.reward is None
        ]

    def judge_seq(self, key: Key, response: str, r_verifiable: float) -> SeqInfo:
        """The GenRM sequence judging `response` to sample `key`'s prompt."""
        if self.shaper is not None:
            response = self.shaper.judged(key, response, self.buffer.sample(key).response_ids)
        judge = self.scorer.prompt(self.buffer.sample(key).prompt.text, response)
        return self._new_seq(
            "reward", key, self.judge_ids(judge), self._rm_params, r_verifiable=r_verifiable
        )

    # ---- reward side -----------------------------------------------------------------------
    def on_reward(self, out: Output) -> list[SeqInfo]:
        info = self.seqs.pop(out.id)
        self.stats.tokens_reward += len(out.prompt_ids) + len(out.output_ids)
        text = self.judge_output(out)
        if happens("judge_garbage", "reward"):  # PIVOT_FAULTS only: the recovery tests
            text = "<think>" + text
        if info.attempt == 0 and self.cfg.reward.retry_unparsable and parse_verdict(text) is None:
            self.scorer.stats.verdict_retries += 1
            return [self._retry_judge(info)]
        return self._judged(info, self.scorer.score(text), text)

    def _retry_judge(self, info: SeqInfo) -> SeqInfo:
        """The same judge prompt again, sampled (a greedy judge would repeat itself)."""
        params = {**self._rm_params}
        params["temperature"] = max(params["temperature"], RETRY_TEMPERATURE)
        return self._new_seq(
            "reward",
            info.key,
            list(info.request.prompt_ids),
            params,
            r_verifiable=info.r_verifiable,
            attempt=1,
        )

    def on_timeout(self, seq_id: int) -> list[SeqInfo]:
        """A judging ran past `reward.timeout_s` (the controller stopped it): the fallback score."""
        info = self.seqs.pop(seq_id)
        return self._judged(info, self.scorer.timed_out(), "(timed out: reward.timeout_s)")

    def _judged(self, info: SeqInfo, r_g: float, text: str) -> list[SeqInfo]:
        self.stats.rewards_finished += 1
        self.judgings[info.key] = self.judgings.get(info.key, 0) + 1
        self.judge_outputs[info.key] = (text, r_g)
        self.stats.genrm_sum += r_g
        return self._rewarded(info.key, self._total(info.key, info.r_verifiable, r_g))

    def on_output(self, out: Output) -> list[SeqInfo]:
        info = self.seqs.get(out.id)
        if info is None:  # already finished elsewhere (a migrated sequence finishing twice)
            self.stats.duplicates_dropped += 1
            return []
        if info.eval_step >= 0:
            self.on_eval(out)
            return []
        if info.role == "rollout":
            return self.on_rollout(out)
        return self.on_reward(out)

    # ---- held-out evaluation -----------------------------------------------------------------
    def start_eval(self, step: int) -> list[SeqInfo]:
        """Greedy rollouts of every held-out prompt for the policy after `step` training steps."""
        if not self.heldout or step in self.evals:
            return []
        self.evals[step] = EvalRun(step, len(self.heldout), time.monotonic())
        params = {**self._ro_params, "temperature": 0.0}
        seqs = []
        for i, p in enumerate(self.heldout):
            key, ids = (step, i, -1), self.policy_ids(p)
            if self.episodes is not None:
                self._open_episode(key, p, ids, eval_step=step)
            seqs.append(self._new_seq("rollout", key, ids, params, eval_step=step))
        return seqs

    def on_eval(self, out: Output) -> None:
        info = self.seqs.pop(out.id)
        if self.episodes is not None:
            self.episodes.on_turn(info.key, out, info.oldest(out.weights_version))
            return
        self._eval_scored(info.key, info.eval_step, list(out.output_ids), out.weights_version)

    def _eval_scored(self, key: Key, step: int, response_ids: list[int], version: int) -> None:
        run = self.evals[step]
        prompt = self.heldout[key[1]]
        score = self.verify.check(self.policy_tok.decode(response_ids), prompt).accuracy
        run.add(key[1], score, len(response_ids), version)
        if run.finished:
            self.eval_results.append(self.evals.pop(run.step).result(time.monotonic()))

    def on_partial(self, partial: Request, current: int) -> None:
        """An aborted sequence's progress; it resumes from here wherever it lands next.
        `current`: the version its replica serves, taken where the engine labelled none of its tokens."""
        info = self.seqs.get(partial.id)
        if info is None:
            return
        self.stats.aborted += 1
        self.stats.migrated += bool(partial.output_ids)
        info.request = partial
        if info.role == "rollout" and partial.output_ids and info.eval_step < 0:
            info.version = info.oldest(partial.versions.oldest(current))

    # ---- what the trainer and the logs get (pivot.runtime.flow.flow_reports) ----------------------
    def batch(self, step: int) -> tuple[TrainBatch, dict[str, float], list[dict]]:
        """Step `step`'s B x G samples as a training batch with GRPO advantages, what they say
        about the policy that made them, and one record per sample (samples.jsonl)."""
        return step_batch(
            step,
            self.buffer,
            self.verifiable,
            self.judgings,
            self.reward_extra,
            self.sampled,
            self.judge_outputs,
            self.policy_tok.encode,
        )

    def metrics(self) -> dict[str, float]:
        return flow_metrics(
            self.stats,
            self.buffer.stats,
            self.scorer.stats,
            self.verify.errors,
            self.cursor.dataset.stats.skipped,
            self.episodes.counts if self.episodes is not None else None,
        )

    def close(self) -> None:
        """Stop the tools' thread (a no-op without tools)."""
        if self.tool_runner is not None:
            self.tool_runner.close()

    # ---- checkpoint ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "buffer": self.buffer.state_dict(),
            "cursor": self.cursor.state_dict(),
            "next_step": self.next_step,
            "next_id": self._next_id,
            "per_sample": [
                [*k, self.verifiable.get(k, 0.0), self.judgings.get(k, 0)]
                for k in set(self.verifiable) | set(self.judgings)
            ],
        }

    def load_state_dict(self, state: dict) -> list[SeqInfo]:
        """Restore; returns the sequences to resubmit: rollouts of samples without a response
        and judgings of samples with a response but no reward."""
        self.buffer.load_state_dict(state["buffer"])
        self.cursor.load_state_dict(state["cursor"])
        self.next_step, self._next_id = state["next_step"], state["next_id"]
        for step, prompt, sample, r_v, judged in state["per_sample"]:
            self.verifiable[(step, prompt, sample)] = r_v
            if judged:
                self.judgings[(step, prompt, sample)] = judged
        out = [self.rollout_seq(key) for key in self.buffer.pending_keys()]
        unrewarded = self.buffer.unrewarded_keys()
        for key in unrewarded:
            sample = self.buffer.sample(key)
            self._verify(key, sample.text, sample.prompt)
        if self.sampling.filters_before_judging():  # once per group: its judgings wait for all G
            for step, prompt_id in sorted({k[:2] for k in unrewarded}):
                out += self._judge_group_once_verified(step, prompt_id)
        else:
            for key in unrewarded:
                sample = self.buffer.sample(key)
                out.append(self.judge_seq(key, sample.text, self.verifiable[key]))
        return out
