"""Ticks, role changes, pre-vote and elections for `RaftNode` (a mixin: the state lives on the
node, see node.py for the fields). Raft sections 5.2 and 5.4.1, thesis 9.6 (pre-vote) and 6.2
(check-quorum / leader lease), 3.10 (TimeoutNow)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .majority import has_quorum, vote_result
from .messages import Entry, EntryKind, PreVote, PreVoteResp, Vote, VoteResp
from .progress import Progress
from .ready import Role

if TYPE_CHECKING:
    from .node import RaftNode

__all__ = []


class ElectionMixin:
    # ---- ticks -----------------------------------------------------------------------------

    def tick(self: RaftNode) -> None:
        """Advance logical time by one tick. The driver calls this on a fixed period."""
        if self._role is Role.LEADER:
            self._tick_leader()
        else:
            self._election_elapsed += 1
            if self._election_elapsed >= self._timeout and self._promotable():
                self._election_elapsed = 0
                self.campaign()

    def _tick_leader(self: RaftNode) -> None:
        opts = self._opts
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        for peer in self._config.learners:   # learners catching up: their round's age
            pr = self._prs.get(peer)
            if pr is not None:
                pr.catch_up_ticks += 1
        if self._election_elapsed >= opts.election_tick:
            self._election_elapsed = 0
            if opts.check_quorum and not self._quorum_active():
                self._become_follower(self._term, None)
                return
            self._abort_transfer()
        if self._heartbeat_elapsed >= opts.heartbeat_tick:
            self._heartbeat_elapsed = 0
            self._bcast_heartbeat()

    def _quorum_active(self: RaftNode) -> bool:
        alive = {}
        for peer, pr in self._prs.items():
            alive[peer] = pr.recent_active or peer == self.id
            pr.recent_active = False
        return has_quorum(self._config.voters, alive)

    def _promotable(self: RaftNode) -> bool:
        return self.id in self._config.voters

    def _reset(self: RaftNode, term: int) -> None:
        if term != self._term:
            self._term = term
            self._vote = None
        self._leader = None
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        # randomised in [election_tick, 2 * election_tick) so that candidates rarely collide
        self._timeout = self._opts.election_tick + self._rng.randrange(self._opts.election_tick)
        self._votes = {}
        self._prs = {}
        self._transfer_target = None
        self._reads = []  # pending reads die with the leadership
        self._reads_waiting = []
        self._peer_acks = {}  # follower: voter -> the last index it acked in this term

    # ---- role changes --------------------------------------------------------------------

    def _become_follower(self: RaftNode, term: int, leader: str | None) -> None:
        self._reset(term)
        self._role = Role.FOLLOWER
        self._leader = leader

    def _become_pre_candidate(self: RaftNode) -> None:
        # term and vote stay as they are: a failed pre-vote leaves no trace
        self._leader = None
        self._votes = {}
        self._role = Role.PRE_CANDIDATE

    def _become_candidate(self: RaftNode) -> None:
        self._reset(self._term + 1)
        self._vote = self.id
        self._role = Role.CANDIDATE

    def _become_leader(self: RaftNode) -> None:
        self._reset(self._term)
        self._role = Role.LEADER
        self._leader = self.id
        last = self._log.last_index
        for peer in self._members():
            self._prs[peer] = Progress(last + 1)
        # we count ourselves only for entries that are durable here (see advance)
        self._prs[self.id].match = self._log.stable
        # No config change until an entry of this term commits: it proves every earlier config
        # entry is committed too (the fix to single-server changes in Ongaro's 2015 erratum).
        self._pending_conf_index = last + 1
        self._append_as_leader([Entry(last + 1, self._term, EntryKind.NOOP, b"", self._last_ts)])

    # ---- campaigning ---------------------------------------------------------------------

    def campaign(self: RaftNode, transfer: bool = False) -> None:
        """Start an election now: pre-vote first, unless disabled or this is a transfer."""
        if not self._promotable():
            return
        if self._opts.pre_vote and not transfer:
            self._become_pre_candidate()
            self._votes[self.id] = True
            if not self._tally(True):
                self._request_votes(True, self._term + 1, False)
        else:
            self._real_campaign(transfer)

    def _real_campaign(self: RaftNode, transfer: bool = False) -> None:
        self._become_candidate()
        self._votes[self.id] = True
        if not self._tally(False):
            self._request_votes(False, self._term, transfer)

    def _request_votes(self: RaftNode, pre: bool, term: int, transfer: bool) -> None:
        last_index, last_term = self._log.last_index, self._log.last_term
        for peer in self._config.voters:
            if peer == self.id:
                continue
            if pre:
                self._send(PreVote(peer, self.id, term, last_index, last_term))
            else:
                self._send(Vote(peer, self.id, term, last_index, last_term, transfer))

    def _tally(self: RaftNode, pre: bool) -> bool:
        """Act on the votes so far; True when the election is decided."""
        result = vote_result(self._config.voters, self._votes)
        if result is None:
            return False
        if not result:
            self._become_follower(self._term, None)
        elif pre:
            self._real_campaign()
        else:
            self._become_leader()
        return True

    # ---- handling vote traffic -------------------------------------------------------------

    def _on_vote_request(self: RaftNode, m: PreVote | Vote) -> None:
        pre = isinstance(m, PreVote)
        can_vote = (
            self._vote == m.frm
            or (self._vote is None and self._leader is None)
            or (pre and m.term > self._term)
        )
        granted = can_vote and self._log.is_up_to_date(m.last_index, m.last_term)
        if pre:
            # a granted pre-vote answers at the proposed term so the asker can count it
            self._send(PreVoteResp(m.frm, self.id, m.term if granted else self._term, granted))
            return
        if granted:
            self._vote = m.frm
            self._election_elapsed = 0
        self._send(VoteResp(m.frm, self.id, self._term, granted))

    def _on_vote_response(self: RaftNode, m: PreVoteResp | VoteResp) -> None:
        pre = isinstance(m, PreVoteResp)
        if pre:
            # granted answers come at the proposed term, refusals at the voter's (our) term
            expected = self._term + 1 if m.granted else self._term
            if self._role is not Role.PRE_CANDIDATE or m.term != expected:
                return
        elif self._role is not Role.CANDIDATE or m.term != self._term:
            return
        self._votes.setdefault(m.frm, m.granted)
        self._tally(pre)

    def _in_lease(self: RaftNode) -> bool:
        """True while we follow a live leader: vote requests are then ignored (thesis 6.2)."""
        return (self._opts.check_quorum and self._leader is not None
                and self._election_elapsed < self._opts.election_tick)
