"""The sentences of the checks, rendered from their facts in one place.

A checker (harness.judge.criteria and its rooms) decides a status and returns the facts it
compared: a reason key and named values, among them phrases not rendered yet
(harness.vocab.verdict.Phrase, Joined). This table turns them into the one sentence a person can
act on, and `render` is the one function that does it, where a result is shown: the verdict
(harness.report.verify.verify_read), the watcher's stop reason, a test or a tool that reads a
sentence. Keyed by (check id, reason); `{name}` fields are the checker's values. It imports only
the vocabulary, so any floor above may render a result.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from harness.vocab.verdict import CriterionResult, Joined, Phrase

SENTENCES: dict[tuple[str, str], str] = {
    # any check
    ("*", "no_fault"): "Fault none ({fault_how}): no injection was requested, so there is no fault to recover from.",
    ("*", "poisoned"): ("The {fault} fault truncated a file of {what} on purpose, so no replacement can recover; "
                        "loop_stopped judges whether the launcher stopped the restart loop."),
    ("*", "corrupted"): ("The {fault} fault {damaged} a file of {what} on purpose, so no replacement may load it; "
                         "loop_stopped judges whether the launcher stopped the restart loop (or the stack fell back to "
                         "an earlier checkpoint)."),
    ("*", "what_checkpoint"): "checkpoint {iteration}",
    ("*", "what_latest"): "the latest checkpoint",
    ("*", "damaged_truncate"): "truncated",
    ("*", "damaged_flip"): "corrupted (4 KiB inverted, size unchanged)",
    ("*", "superseded"): "Superseded: {why}.",
    # a run of several faults: the sentence of one fault's check, led by the fault it is about
    ("*", "of_episode"): "[fault {number} of {of}: {kind} on rank {rank}, {fault_at}] ",
    ("*", "superseded_load_cut"): ("fault {next} hit cycle {next_cycle} before this episode's replacement finished "
                                   "its load; episode {next} judges the recovery"),
    ("*", "superseded_not_last"): ("fault {next} (cycle {next_cycle}) ended this episode's training; the training to "
                                   "the end of the run is judged in the last episode"),
    ("*", "superseded_nothing_new"): ("no checkpoint beyond episode {previous}'s ({k}) was committed before this "
                                      "fault: what was committed before it is episode {previous}'s"),
    ("*", "no_usable_baseline"): "No usable baseline: {problem}.",
    ("*", "baseline_skipped"): "Not judged, by request: {why}.",
    # the baseline a run's contract names, as verify finds it (harness.report.verify.recorded_baseline)
    ("baseline", "missing"): ("the baseline {run_id} that run.json's contract names ({how}) is not in {runs}: copy its "
                              "run directory there, beside this run, give verify --baseline RUN_DIR, or judge without "
                              "it with --baseline none"),
    ("baseline", "not_a_dir"): ("{path}, where the baseline {run_id} that run.json's contract names should be, is "
                                "{what}, which is never followed or read: put the baseline's run directory itself "
                                "there, or give verify --baseline RUN_DIR"),
    ("baseline", "unusable"): "the baseline {run_id} that run.json's contract names cannot be used: {error}",
    ("baseline", "changed"): ("the checkpoints of the baseline {run_id} changed since this run was judged against "
                              "them ({change}): put them back as they were, or judge without them with --baseline "
                              "none"),
    ("baseline", "checkpoints_gone"): ("the baseline {run_id} has no checkpoints/ directory any more (this run was "
                                       "judged against {entries} entries of it): put them back, or judge without "
                                       "them with --baseline none"),
    ("baseline", "other_config"): ("the baseline {run_id} now records configuration hash {now}, not {then} as when "
                                   "this run was judged against it: it is another run under the same name"),
    ("baseline", "change"): "{then_entries} entries and {then_bytes} bytes then, {now_entries} and {now_bytes} now",
    ("baseline", "skipped"): "--baseline none: judged without the recorded baseline {run_id} ({how})",
    ("baseline", "skipped_none_recorded"): "--baseline none: judged without a baseline",
    ("baseline", "copied"): ("the checkpoints of the baseline {run_id} hold the same files with the same sizes as when "
                             "this run was judged against them, with other modification times (copied without "
                             "keeping times)"),
    ("*", "crashed"): "The checker failed: {error}",
    # fragments several checks share: a world change, how a process ended
    ("*", "world_change"): ("world size {before}{dp_before} in cycle {failed}, {after}{dp_after} in cycle {replacement} "
                            "(Megatron's arguments)"),
    ("*", "dp"): " (DP {dp})",
    ("*", "killed_by"): "killed by {signal}",
    ("*", "killed_by_number"): "killed by signal {number}",
    ("*", "exit_status"): "exit status {code}",
    ("*", "code_meaning"): "{code} ({meaning})",
    # pre_fault_checkpoint
    ("pre_fault_checkpoint", "never_injected"): (
        "The {fault} fault was requested ({fault_how}) but never injected: there is no fault_injected.json.{nemesis} "
        "Give the run enough iterations to commit a checkpoint beyond the nemesis's startup baseline (train_iters well "
        "above save_interval) and check the [nemesis] lines of the fault rank."),
    ("pre_fault_checkpoint", "other_fault"): ("The marker records a {marked_fault} fault but this run asked for {fault} "
                                              "({fault_how}): verify with --fault {marked_fault} if that was intended."),
    ("pre_fault_checkpoint", "impossible_marker"): ("{marker} cannot be true: {problem}; the marker is damaged or not "
                                                    "this run's: rerun with a new run id."),
    ("pre_fault_checkpoint", "outside_the_run"): ("{marker} says the fault was injected at {when}: the marker is not "
                                                  "this run's (copied from another run?) or a clock is wrong; rerun "
                                                  "with a new run id."),
    ("pre_fault_checkpoint", "nemesis_said"): " The nemesis said: {reason}.",
    ("pre_fault_checkpoint", "caveats"): " ({caveats})",
    ("pre_fault_checkpoint", "before_launch"): "{at}, {gap} s before the launch started ({launch})",
    ("pre_fault_checkpoint", "after_launch"): "{at}, {gap} s after the launch ended ({launch})",
    ("pre_fault_checkpoint", "in_save_incomplete"): ("The in-save marker does not record both the committed checkpoint "
                                                     "(committed_iteration) and the save in flight (iteration): it is "
                                                     "damaged; rerun with a new run id."),
    ("pre_fault_checkpoint", "no_iteration"): ("{marker} records no checkpoint iteration, so nothing proves a "
                                               "checkpoint was committed before the injection: the marker is damaged; "
                                               "rerun with a new run id."),
    ("pre_fault_checkpoint", "not_beyond_baseline"): ("The fault fired at checkpoint iteration {committed}, not beyond "
                                                      "the startup baseline {baseline}: no checkpoint of this run "
                                                      "preceded it; rerun with a new run id and a clean checkpoint "
                                                      "directory."),
    ("pre_fault_checkpoint", "not_on_disk"): ("The marker says checkpoint {committed} was committed before the fault, "
                                              "but {dir} has no {iter_dir}: the checkpoint directory is not the one the "
                                              "run saved to, or it was deleted."),
    ("pre_fault_checkpoint", "not_committed"): ("The fault fired after the tracker named iteration {committed}, but "
                                                "{rel} has no metadata.json: that save was never committed (its async "
                                                "finalization did not complete), so the run had no complete checkpoint "
                                                "to recover from."),
    ("pre_fault_checkpoint", "no_tracker"): ("{dir} has no readable {tracker} (absent, a link or not a regular file), "
                                             "although Megatron writes it after every committed save and the fault "
                                             "fired on its value {committed}: this is not the checkpoint directory the "
                                             "run saved to, or the tracker was removed; copy the checkpoint directory "
                                             "whole."),
    ("pre_fault_checkpoint", "tracker_not_a_number"): ("{dir}/{tracker} holds {held}, not an iteration number, "
                                                       "although the fault fired on its value {committed}: the tracker "
                                                       "was damaged or written by something else after the run."),
    ("pre_fault_checkpoint", "tracker_behind"): ("{dir}/{tracker} names iteration {tracked}, below checkpoint "
                                                 "{committed} that the marker says was committed before the fault: "
                                                 "Megatron's tracker only moves forward, so it was rewritten, or this "
                                                 "is not the run's checkpoint directory."),
    ("pre_fault_checkpoint", "no_log"): ("The marker names checkpoint {committed}, but there is no application log to "
                                         "correlate it with Megatron's save lines: copy logs/ with the run directory."),
    ("pre_fault_checkpoint", "no_save_line"): ("The marker names checkpoint {committed}, but Megatron's log of cycles "
                                               "0..{upto} has no 'successfully saved checkpoint from iteration "
                                               "{committed}' line: the marker and the training log disagree (wrong "
                                               "--save directory or a tracker written by something else)."),
    ("pre_fault_checkpoint", "in_save_after_the_save"): (
        "The in-save fault was meant to land while checkpoint {in_flight} was being saved, but Megatron's log says "
        "checkpoint {in_flight} was committed before the injection: the fault hit after the save, not in it; lengthen "
        "the save (--save-delay-ms) or poll faster."),
    ("pre_fault_checkpoint", "caveat_link"): ("{dir} is a symbolic link, not followed, so neither metadata.json nor the "
                                              "tracker was checked"),
    ("pre_fault_checkpoint", "caveat_no_dir"): ("the checkpoint directory is not in the run directory, so metadata.json "
                                                "and the tracker were not checked"),
    ("pre_fault_checkpoint", "caveat_in_flight"): "the save of iteration {in_flight} was in flight, uncommitted, when the fault hit",
    ("pre_fault_checkpoint", "caveat_also_committed"): "checkpoint {also} was also committed before the injection",
    ("pre_fault_checkpoint", "agree_all"): "the marker, Megatron's save line, metadata.json and the tracker agree",
    ("pre_fault_checkpoint", "agree_log"): "the marker and Megatron's save line agree",
    ("pre_fault_checkpoint", "caveat_pruned"): ("non-persistent checkpoint {committed} is no longer on disk: Megatron "
                                                "removes older non-persistent checkpoints itself "
                                                "(cleanup_old_non_persistent_checkpoint) once checkpoint {later} of "
                                                "that tier was saved, so metadata.json and the tracker were not "
                                                "checked"),
    ("pre_fault_checkpoint", "committed"): ("{Ckpt} {committed} was committed before the {fault} injection on rank "
                                            "{rank} at {when}: {agree}{caveats}."),
    # optimizer_reload
    ("optimizer_reload", "no_injection"): ("No injection happened (see pre_fault_checkpoint), so no replacement had to "
                                           "reload anything."),
    ("optimizer_reload", "no_replacement_log"): ("The launcher started cycle {cycle}, but there is no application log "
                                                 "of that cycle (logs/*_cycle{cycle}.log missing or empty): the reload "
                                                 "cannot be checked."),
    ("optimizer_reload", "no_replacement"): ("No replacement workers started (see replacement_cycle), so nothing was "
                                             "reloaded."),
    ("optimizer_reload", "who"): "The replacement workers (cycle {cycle})",
    ("optimizer_reload", "loaded_both"): "optimizer and scheduler",
    ("optimizer_reload", "loaded_optimizer"): "optimizer",
    ("optimizer_reload", "loaded_scheduler"): "scheduler (plain optimizer)",
    ("optimizer_reload", "who_changed"): "The replacement workers (cycle {cycle}, after the job {way}: {change})",
    ("optimizer_reload", "skip_flag"): ("{who} ran with {option}: Megatron skips the optimizer state when loading "
                                        "checkpoint {expected}; remove {option} from the workload arguments."),
    ("optimizer_reload", "skip_flag_command_line"): ("{who} ran with {option} on the run's command line, so Megatron "
                                                     "skips the optimizer state when loading checkpoint {expected}; "
                                                     "remove {option}."),
    ("optimizer_reload", "from_random"): ("{who} started from random instead of loading checkpoint {expected}: "
                                          "Megatron found no latest_checkpointed_iteration.txt under --load; make "
                                          "--load equal --save on storage every node sees."),
    ("optimizer_reload", "no_load"): ("{who} printed no checkpoint load at all (no 'loading distributed checkpoint' "
                                      "line in {source}): check --load and --ckpt-format."),
    ("optimizer_reload", "load_unfinished"): ("{who} began loading checkpoint {began} but never printed 'successfully "
                                              "loaded checkpoint': the load failed; see the traceback in that log."),
    ("optimizer_reload", "nothing_to_compare"): ("{who} loaded checkpoint {loaded}, but the marker records no iteration "
                                                 "to compare it with."),
    ("optimizer_reload", "loaded_partial"): ("{who} loaded {where}, the partial directory whose async save was in "
                                             "flight when the fault hit (never committed: no metadata.json, tracker at "
                                             "{expected}), instead of checkpoint {expected}, the latest committed: the "
                                             "loader counted an unpublished iter_* directory as a checkpoint."),
    ("optimizer_reload", "older"): "an older",
    ("optimizer_reload", "newer"): "a newer",
    ("optimizer_reload", "hint_ckpt_step"): " --ckpt-step {step} pins the load",
    ("optimizer_reload", "hint_tracker"): " the tracker was stale or pointed elsewhere",
    ("optimizer_reload", "other_checkpoint"): ("{who} loaded checkpoint {loaded}, {which} one than {expected}, the "
                                               "latest committed at fault time:{hint}."),
    ("optimizer_reload", "fresh_start"): "{who} loaded iteration 0: that is a fresh start, not a recovery.",
    ("optimizer_reload", "without_optimizer"): (
        "{who} loaded checkpoint {expected} without its optimizer state: the load block has no 'Loading distributed "
        "optimizer sharded state' line (--no-load-optim, --finetune, a release checkpoint or no_save_optim in the saved "
        "arguments)."),
    ("optimizer_reload", "optimizer_setting_unseen"): (
        "{who} loaded checkpoint {expected} and its scheduler state, but printed no 'Loading distributed optimizer "
        "sharded state' line, and whether its optimizer is the distributed one is not shown (no arguments table, no "
        "megatron-core 'Setting up optimizer with config' line): the plain optimizer loads silently, so the "
        "optimizer's reload cannot be told from the log."),
    ("optimizer_reload", "no_dcp_metadata"): ("{who} loaded checkpoint {expected}, but {rel} has no DCP .metadata: the "
                                              "checkpoint on disk is not the one loaded, or it was damaged afterwards."),
    ("optimizer_reload", "no_optimizer_tensors"): ("{who} printed an optimizer load, but {rel} holds no optimizer "
                                                   "tensors (no key with Adam's exp_avg or exp_avg_sq, plain, "
                                                   "distributed or chained_<i>.): it was saved without optimizer state "
                                                   "(--no-save-optim)."),
    ("optimizer_reload", "disk_keys"): "; {keys} optimizer keys in {rel}",
    ("optimizer_reload", "disk_keys_unlisted"): "; optimizer keys not listed ({note})",
    ("optimizer_reload", "disk_absent"): "; checkpoint directory not available, optimizer keys not listed",
    ("optimizer_reload", "resharded"): ("; resharded: the checkpoint saved by {before} ranks was loaded by {after}, "
                                        "with its optimizer state (optimizer_state and loss_continuity judge what that "
                                        "state holds)"),
    # harness.vocab.tiers: local checkpoints (NVRx's LocalCheckpointManager)
    ("optimizer_reload", "local_reloaded"): ("{who} loaded local checkpoint {loaded}, the newest committed at fault "
                                             "time (NVRx validated its save){which}{missing}."),
    ("optimizer_reload", "local_copies"): ": {copies}",
    ("optimizer_reload", "local_copies_unlogged"): ("; which copy each rank read is not in the log (NVRx prints it "
                                                    "at DEBUG only: --logging-level 10)"),
    ("optimizer_reload", "local_missing"): ("; {n} shard file(s) were missing where NVRx first looked, so they "
                                            "came from replicas"),
    ("optimizer_reload", "local_unvalidated"): ("{who} loaded local checkpoint {loaded}, whose save NVRx never "
                                                "validated: {why}{held}; a replica or shard of an unfinished save may "
                                                "be incomplete or inconsistent across ranks (Megatron-LM #5281)."),
    ("optimizer_reload", "local_held"): " (copies written: {held})",
    ("optimizer_reload", "local_failed"): ("its finalize said 'Failure during saving local checkpoint from iteration "
                                           "{loaded} (last valid iteration is {last_valid})'"),
    ("optimizer_reload", "local_never_validated"): ("no 'Successfully saved local checkpoint from iteration {loaded}' "
                                                    "(NVRx) nor Megatron's 'successfully saved local checkpoint' line "
                                                    "came before the fault"),
    # harness.vocab.tiers: NVRx's in-process Wrapper
    ("optimizer_reload", "who_inprocess"): "The restarted function (in-process restart in cycle {cycle})",
    ("optimizer_reload", "inprocess_reloaded"): ("{who} loaded checkpoint {loaded}, the latest committed at fault "
                                                 "time, after {restarts} in-process restart(s)."),
    ("optimizer_reload", "inprocess_from_start"): ("{who} started over from iteration {loaded} instead of loading "
                                                   "checkpoint {expected}: an in-process restart that restarts training "
                                                   "from the beginning loses all work (Megatron-LM #2774); check that "
                                                   "the restarted function loads --load."),
    ("optimizer_reload", "inprocess_other"): ("{who} loaded checkpoint {loaded}, {which} one than {expected}, the "
                                              "latest committed at fault time."),
    ("optimizer_reload", "inprocess_no_reload"): ("NVRx's Wrapper restarted in cycle {cycle}, but Megatron printed no "
                                                  "checkpoint load after the restart, so nothing shows what it "
                                                  "resumed from."),
    ("optimizer_reload", "inprocess_over_limit"): ("NVRx's Wrapper restarted {restarts} times in cycle {cycle}, past "
                                                   "--inprocess-max-iterations {limit}: the retry limit did not hold "
                                                   "(Megatron-Bridge PR #5755)."),
    ("optimizer_reload", "older_tier"): ("{who} restored {restored}, older than {newest}, the newest committed at "
                                         "fault time{said}: the loader chose an older checkpoint tier than the newest "
                                         "committed one, so the work since then is lost; check that --load, "
                                         "--non-persistent-ckpt-type and --non-persistent-global-ckpt-dir of the "
                                         "restarted job name the directories the job saved to."),
    ("optimizer_reload", "reloaded"): ("{who} loaded {ckpt} {expected}, the latest committed at fault time, with "
                                       "optimizer state ({lines} lines in the load block{disk_note}){resharded}."),
    # later_checkpoint
    ("later_checkpoint", "no_replacement"): ("No replacement workers started (see replacement_cycle), so no training "
                                             "followed the fault."),
    ("later_checkpoint", "after_restore"): "after the restore of checkpoint {restored}",
    ("later_checkpoint", "in_run"): "in this run",
    ("later_checkpoint", "no_log"): ("There is no application log {where}: training progress cannot be checked; copy "
                                     "logs/ with the run directory."),
    ("later_checkpoint", "no_iteration_beyond"): "no iteration line beyond {restored} {where}",
    ("later_checkpoint", "skipped_step"): ("iteration {iteration} skipped its optimizer step (number of skipped "
                                           "iterations: {skipped})"),
    ("later_checkpoint", "no_later_save"): ("no checkpoint beyond {restored} was committed (no 'successfully saved "
                                            "checkpoint' line)"),
    ("later_checkpoint", "logged_not_committed"): "checkpoint {iteration} was logged as saved but {rel} has no metadata.json",
    ("later_checkpoint", "stopped_early"): "training stopped at iteration {iteration} of {train_iters}",
    ("later_checkpoint", "final_not_committed"): ("the final checkpoint {train_iters} (a multiple of save_interval "
                                                  "{save_interval}) was not committed"),
    ("later_checkpoint", "did_not_commit"): "Training did not commit its work {where}: {problems}.",
    ("later_checkpoint", "steps"): "iterations {restored_next}..{last}",
    ("later_checkpoint", "steps_unknown"): "iterations",
    ("later_checkpoint", "committed"): ("Training committed {steps} {where} with no skipped step, checkpoint "
                                        "{later_text} was committed, and the final iteration {train_iters} was "
                                        "reached."),
    ("later_checkpoint", "final_never_committed"): ("The fault hit after iteration {restored}, the final one, but {rel} "
                                                    "has no metadata.json: the final checkpoint was never committed."),
    ("later_checkpoint", "trained_beyond_final"): ("The replacement trained beyond the final iteration {train_iters} "
                                                   "(iteration {iteration}): --train-iters changed between cycles."),
    ("later_checkpoint", "trained_again"): ("Checkpoint {restored} is the final iteration, yet the replacement trained "
                                            "iteration {iteration} again: it did not resume at {restored}."),
    ("later_checkpoint", "nothing_left"): ("Nothing was left to train: checkpoint {restored} is the final iteration "
                                           "{train_iters}, committed before the fault, and the replacement trained no "
                                           "iteration again (its reload is optimizer_reload's, its exit "
                                           "clean_finish's)."),
    # clean_finish
    ("clean_finish", "budget_spent"): ("its restarts ran out (--max-restarts {budget} allows {budget} restart(s) and "
                                       "{failed} cycle(s) failed; raise --max-restarts)"),
    ("clean_finish", "no_restart_announced"): ("its restarts ran out (it recorded the failure of cycle {cycle}, "
                                               "announced no restart and started no later cycle; raise --max-restarts, "
                                               "which defaults to 0)"),
    ("clean_finish", "none_left"): ("its restarts ran out (it said no restart attempts were left; raise "
                                    "--max-restarts)"),
    ("clean_finish", "gave_up"): ("The launcher gave up after the fault without starting replacement workers{why} (see "
                                  "replacement_cycle), so the job ended in failure, not cleanly."),
    ("clean_finish", "hung_undetected"): ("The job never restarted after the fault: it hung, undetected by the launcher, "
                                          "until the harness stopped it ({why}; see replacement_cycle), so it could "
                                          "not finish cleanly."),
    ("clean_finish", "never_restarted"): ("The job never restarted after the fault (see replacement_cycle), so it could "
                                          "not finish cleanly."),
    ("clean_finish", "exit_status"): "the launcher exited with status {status}",
    ("clean_finish", "launcher_failed"): "the launcher reported a failure",
    ("clean_finish", "no_success"): ("no launcher success was recorded ('Agent .run() is OK', exit code 0 or "
                                     "launch.json)"),
    ("clean_finish", "stopped_early"): "the harness stopped the launch early ({why})",
    ("clean_finish", "marker_without_fault"): "an injection marker exists although the fault is none",
    ("clean_finish", "plan_holds"): " (the {fault_at} plan holds {planned})",
    ("clean_finish", "injected_too_often"): "the fault was injected {count} times{plan}",
    ("clean_finish", "only_one"): "only the injected one may",
    ("clean_finish", "only_some"): "only the {allowed} injected ones may",
    ("clean_finish", "too_many_failed_cycles"): "{failed} cycles failed ({cycles}); {only}",
    ("clean_finish", "restarted_without_fault"): "the workers restarted (cycle {cycle}) although no fault was injected",
    ("clean_finish", "no_progress_stop"): "NVRx stopped the job for lack of progress across restarts",
    ("clean_finish", "in_last_start"): " in its last start ({source})",
    ("clean_finish", "no_app_log"): " (no application log)",
    ("clean_finish", "not_done"): "Megatron never printed '[after training is done]'{where}",
    ("clean_finish", "not_clean"): "The run did not finish cleanly: {problems}.",
    ("clean_finish", "never_fired"): ("{count} of the {planned} planned faults never fired: {faults} (run.json's "
                                      "contract promised them; no marker says they happened, so their recoveries were "
                                      "never exercised: give the run the iterations and restarts to reach them)"),
    ("clean_finish", "planned_fault"): "fault {index} ({kind} on rank {rank}, {moment})",
    ("clean_finish", "and_last"): " and {last}",
    ("clean_finish", "shape_planned"): ("with exactly {planned} injections ({fault_at}) and as many failed cycles"),
    ("clean_finish", "shape_one"): "with exactly one injection and one failed cycle",
    ("clean_finish", "shape_none_injected"): ("without any failed cycle (and without the fault, see "
                                              "pre_fault_checkpoint)"),
    ("clean_finish", "shape_baseline"): "in a single cycle without any fault",
    ("clean_finish", "clean"): ("The launcher reported success {shape}, no no-progress stop, and Megatron reached "
                                "'[after training is done]'."),
    # launcher_identity
    ("launcher_identity", "where"): " from {path}",
    ("launcher_identity", "sha"): " (sha256 {sha}…, {files} files)",
    ("launcher_identity", "no_plan"): ("run.json records no planned launcher (a run directory from before run.json "
                                       "held a contract, or a user's own script): there is nothing to compare the "
                                       "workers' NVRx with."),
    ("launcher_identity", "none_said"): ("No worker said which NVRx it imported (no '[nemesis] rank R launcher "
                                         "identity:' line in the application logs), so it cannot be told whether the "
                                         "planned NVRx {planned}{where} ran: run the workers under this suite's "
                                         "nemesis, which states it."),
    ("launcher_identity", "got_found"): "nvidia_resiliency_ext {version} from {path} (sha256 {sha}…)",
    ("launcher_identity", "got_missing"): "no nvidia_resiliency_ext at all ({why})",
    ("launcher_identity", "other"): ("The workers ran under another launcher than planned: rank {rank} (cycle {cycle}) "
                                     "imported {got}, not the planned NVRx {planned}{where}{sha} ({others} of {count} "
                                     "worker statements differ): point --nvrx-path and every node's PYTHONPATH at the "
                                     "planned install, or plan for the one the workers import."),
    ("launcher_identity", "unknown_all"): ("No worker could tell which NVRx it imported ({why}), so the planned NVRx "
                                           "{planned}{where} cannot be confirmed."),
    ("launcher_identity", "caveat_unknown"): "{n} statement(s) could not tell",
    ("launcher_identity", "caveat_version_only"): ("{n} by version only (the digest of the files is unknown on one "
                                                   "side)"),
    ("launcher_identity", "caveat_elsewhere"): "{n} with the same files at another path ({path})",
    ("launcher_identity", "caveats"): "; {caveats}",
    ("launcher_identity", "same"): ("Every worker statement names the planned NVRx {planned}{where}{sha} ({count} "
                                    "statement(s): ranks {ranks}; cycles {cycles}){caveats}."),
    # disk_full_handled
    ("disk_full_handled", "no_injection"): ("No disk-full injection happened (see pre_fault_checkpoint): no save met a "
                                            "full filesystem."),
    ("disk_full_handled", "fill_too_late"): ("The save of iteration {in_flight} was committed before the filesystem "
                                             "filled (or no write of it reported ENOSPC): the fault came after the "
                                             "save, not in it (see pre_fault_checkpoint); rerun with a slower save "
                                             "(--save-delay-ms)."),
    ("disk_full_handled", "committed_partial"): ("the save of iteration {in_flight}, in flight when the filesystem "
                                                 "filled, was committed in cycle {cycle} although a write of it "
                                                 "reported ENOSPC"),
    ("disk_full_handled", "loaded_partial"): ("replacement cycle {cycle} loaded checkpoint {loaded}, the save of "
                                              "iteration {in_flight} that met the full filesystem, before any later "
                                              "save committed it whole"),
    ("disk_full_handled", "tracker_advanced"): ("the tracker handed replacement cycle {cycle} checkpoint {named}, the "
                                                "save of iteration {in_flight} that met the full filesystem: it was "
                                                "advanced past the last complete checkpoint"),
    ("disk_full_handled", "partial_used"): ("The save that met the full filesystem was used as a checkpoint: "
                                            "{problems}."),
    ("disk_full_handled", "recovered"): ("Recovered from the previous checkpoint: the save of iteration {in_flight} "
                                         "met the full filesystem ({error}) and was never committed or loaded; "
                                         "replacement cycle {cycle} loaded checkpoint {loaded} (committed: "
                                         "{committed})."),
    ("disk_full_handled", "enospc_logged"): "ENOSPC was logged",
    ("disk_full_handled", "enospc_unlogged"): "no ENOSPC line was logged",
    ("disk_full_handled", "stopped"): ("Stopped with a clear error: the save of iteration {in_flight} met the full "
                                       "filesystem ({line}), nothing was committed or loaded from it, and no "
                                       "replacement loaded a checkpoint."),
    ("disk_full_handled", "hung_after_error"): ("Nothing partial was used: the save of iteration {in_flight} met the "
                                                "full filesystem ({line}) and nothing was committed or loaded from it; "
                                                "but the stack did not stop or restart after the error: it hung until "
                                                "the harness stopped it (see replacement_cycle)."),
    ("disk_full_handled", "silent"): ("The full filesystem went unreported: no line says ENOSPC ('No space left on "
                                      "device') and no replacement resumed from checkpoint {committed}; the save of "
                                      "iteration {in_flight} was lost without a word."),
    # loop_stopped
    ("loop_stopped", "with_a_failure"): "with a failure",
    ("loop_stopped", "no_loop_planned"): "The {fault} fault ({fault_at}) plans no restart loop.",
    ("loop_stopped", "no_injection"): ("No injection happened (see pre_fault_checkpoint): no checkpoint was poisoned, "
                                       "so no restart loop could start."),
    ("loop_stopped", "went_unnoticed"): ("replacement cycle {cycle} loaded or trained from the damaged checkpoint "
                                         "{poisoned_checkpoint}: the {damaged} file went unnoticed"),
    ("loop_stopped", "harness_stopped"): "NVRx never stopped the loop: the harness did ({why})",
    ("loop_stopped", "looped_until_exhausted"): ("the launcher looped until --max-restarts ran out ({failed} failed "
                                                 "replacement cycles) and exited {exited}, instead of stopping for "
                                                 "lack of progress with exit {no_restart_code}"),
    ("loop_stopped", "no_stop_unknown_exit"): "no no-progress stop was recorded and the launcher's exit status is unknown",
    ("loop_stopped", "stop_wrong_exit"): "the launcher logged a no-progress stop but exited {code}, not {no_restart_code}",
    ("loop_stopped", "over_the_limit"): ("{failed} replacement cycles failed before the stop, more than the limit of "
                                         "{limit} ({limit_how})"),
    ("loop_stopped", "corrupt_file"): "the corrupt file is {file} ({damaged} by the fault)",
    ("loop_stopped", "repeated_load"): ("each of the {failing} failed replacement cycle(s) began loading checkpoint "
                                        "{loading} and never finished it"),
    ("loop_stopped", "no_cause"): ("nothing names the cause of the loop (no poisoned file in the marker, no repeated "
                                   "failed load)"),
    ("loop_stopped", "not_stopped"): "The restart loop was not stopped as it must be: {problems}.",
    ("loop_stopped", "not_refused"): "The damaged checkpoint was not refused: {problems}.",
    ("loop_stopped", "fell_back"): ("The stack fell back to checkpoint {loaded}, committed before the damaged "
                                    "checkpoint {poisoned_checkpoint}: replacement cycle {cycle} loaded it instead of "
                                    "the {damaged} one, so no restart loop was needed."),
    ("loop_stopped", "how_exit"): "exit {code}",
    ("loop_stopped", "how_unknown"): "a no-progress stop (exit status not recorded)",
    ("loop_stopped", "stopped"): ("NVRx's no-progress rule stopped the restart loop after {failed} failed replacement "
                                  "cycle(s) (limit {limit}, {limit_how}) with {how}: {problems}."),
    # state_equivalence
    ("state_equivalence", "no_fault"): "Fault none: there is no restore whose end state could differ.",
    ("state_equivalence", "no_baseline"): ("No baseline run given (--baseline auto or RUN_DIR of an uninterrupted run "
                                           "of the same configuration), so there is no end state to compare with."),
    ("state_equivalence", "poisoned"): ("The {fault} fault plans a restart loop, not a recovery: there is no recovered "
                                        "end state."),
    ("state_equivalence", "nothing_restored"): ("No checkpoint was restored after the fault (see optimizer_reload), so "
                                                "there is no recovered end state to compare."),
    ("state_equivalence", "nothing_committed"): ("This run committed no checkpoint (see later_checkpoint), so its end "
                                                 "state is not on disk."),
    ("state_equivalence", "not_compared"): "The end states could not be compared: {note}.",
    ("state_equivalence", "other_layout"): ("{checkpoint} and the baseline's {baseline_checkpoint} do not hold the same "
                                            "tensors ({missing} differ, e.g. {example}): the restored run ended with "
                                            "another model or optimizer layout."),
    ("state_equivalence", "nothing_comparable"): ("{checkpoint} holds no tensor that could be compared with the "
                                                  "baseline's."),
    ("state_equivalence", "skipped"): ("; {count} pickled object(s) not compared ({shown}): the RNG state and a step "
                                       "counter kept there show only through the tensors they shape"),
    ("state_equivalence", "bitwise"): "bitwise equality",
    ("state_equivalence", "tolerance"): "the {cls} tolerance rtol={rtol}, atol={atol}",
    ("state_equivalence", "differs"): ("{failing} of {compared} tensors of {checkpoint} differ from the uninterrupted "
                                       "baseline's ({baseline_checkpoint}) beyond {bound} ({why}); the first is {key} "
                                       "({cls}, max abs difference {diff}; largest per class: {worst}): the restored "
                                       "training state differs (optimizer state, data position or RNG)."),
    ("state_equivalence", "bitwise_equal"): ("All {compared} tensors of {checkpoint} ({classes}) equal the "
                                             "uninterrupted baseline's {baseline_checkpoint} bitwise ({why}){skipped}."),
    ("state_equivalence", "not_bitwise"): ", {count} of them not bitwise (largest difference per class: {largest})",
    ("state_equivalence", "within_tolerance"): ("All {compared} tensors of {checkpoint} ({classes}) are within the "
                                                "tolerance of their class of the uninterrupted baseline's "
                                                "{baseline_checkpoint}{close} ({why}; tolerances: {tolerances}){skipped}."),
    # replacement_cycle
    ("replacement_cycle", "no_injection"): ("No injection happened (see pre_fault_checkpoint), so there is no failed "
                                            "cycle to look for."),
    ("replacement_cycle", "cycle_records_only"): ("NVRx's cycle records show cycle {failed_cycle} ended and cycle "
                                                  "{next_cycle} started after the injection (the launcher log itself "
                                                  "is not in the run directory)."),
    ("replacement_cycle", "no_launcher_log"): ("The run directory has no launcher log (logs/launcher.log or "
                                               "logs/console.log): the failed cycle{timeouts} cannot be seen; copy the "
                                               "launcher log with the run."),
    ("replacement_cycle", "earlier_fault_unnoticed"): ("The launcher log records no failure of cycle {marker_cycle} "
                                                       "after fault {index} of {planned} ({fault_at}): the launcher did "
                                                       "not notice it."),
    ("replacement_cycle", "unnoticed"): ("The launcher log records no failure of cycle {failed_cycle} after the {fault} "
                                         "injection (no 'failed (exitcode', 'Worker group UNHEALTHY/FAILED' or "
                                         "failure_detected line): the launcher did not notice the fault; check that the "
                                         "workers ran under ft_launcher with rank monitors."),
    ("replacement_cycle", "hung_undetected"): ("The launcher log records no failure of cycle {failed_cycle} after the "
                                               "{fault} injection, and the run then stopped making progress until the "
                                               "harness stopped it ({why}): the workers stayed alive but stuck, so "
                                               "neither torch elastic (live processes) nor the rank monitors (a worker "
                                               "disconnected from its monitor is not timed) noticed; the stack hung "
                                               "undetected instead of restarting."),
    ("replacement_cycle", "new_cycle"): "cycle {cycle}",
    ("replacement_cycle", "new_cycle_log_only"): ("cycle {cycle} (seen in its application log; the launcher log has no "
                                                  "start record)"),
    ("replacement_cycle", "exhausted"): "restarts were exhausted (raise --max-restarts; it defaults to 0)",
    ("replacement_cycle", "restart_never_began"): "it announced a restart ({left}/{max} attempts left) that never began",
    ("replacement_cycle", "budget_spent"): ("the restart budget ran out: --max-restarts {budget} allows {budget} "
                                            "restart(s) and this plan injected {faults} faults ({fault_at}), each "
                                            "costing one; raise --max-restarts to {faults} or more"),
    ("replacement_cycle", "no_replacement"): ("The launcher recorded the failure of cycle {failed_cycle} but started no "
                                              "replacement workers: {why}."),
    ("replacement_cycle", "no_timeout"): ("no section or out-of-section timeout message exists for cycle "
                                          "{failed_cycle}: the hang of rank {rank} was not detected by a rank monitor "
                                          "(check --ft-rank-section-timeouts and that the workload opens its 'step' "
                                          "section)"),
    ("replacement_cycle", "timeouts_before"): ("every timeout message of cycle {failed_cycle} is stamped before the "
                                               "injection at {injected_at}: a rank hung before the fault, so the stop "
                                               "of rank {rank} is not what the launcher detected; look at the earlier "
                                               "timeout's rank"),
    ("replacement_cycle", "how_named"): " after a {kind} timeout naming the {state} rank {rank}",
    ("replacement_cycle", "state_stopped"): "stopped",
    ("replacement_cycle", "state_hung"): "hung",
    ("replacement_cycle", "not_sigstop"): ("the marker records {signal}, not {expected}, so nothing proves rank {rank} was "
                                           "stopped, and no timeout message names it"),
    ("replacement_cycle", "delay"): " {delay} s after the stop",
    ("replacement_cycle", "how_peer"): (" after a {kind} timeout of rank(s) {who}{delay} (blocked waiting for the "
                                        "stopped rank {rank}, whose own monitor had not fired when the launcher stopped "
                                        "the group; the marker proves rank {rank}, pid {pid}, got {got})"),
    ("replacement_cycle", "how_exit_code"): " (rank {rank}'s worker ended with exitcode {code}, {meaning}, as {kind} does)",
    ("replacement_cycle", "died_otherwise"): ("the fault rank {rank}'s worker (pid {pid}) ended with exitcode {code} "
                                              "({meaning}), not {wanted} as the {kind} fault ends it: it died of "
                                              "something else"),
    ("replacement_cycle", "allowed_min"): "--nnodes {min}:{max} allows no fewer than {min} node(s)",
    ("replacement_cycle", "allowed_fixed"): "the plan asked for a fixed number of nodes (no --nnodes MIN:MAX)",
    ("replacement_cycle", "allowed_unknown"): "no run.json says the plan allowed it (--nnodes MIN:MAX)",
    ("replacement_cycle", "world_changed"): ("the job {way}: {change}, and {allowed}; a replacement must run the world "
                                             "the checkpoint was trained on, or the plan must allow the change"),
    ("replacement_cycle", "node_text"): "{text}",
    ("replacement_cycle", "and_timeouts"): " and the rank timeouts",
    # the nodes of a node fault's cycles (cycle records, else the rendezvous lines' node ids)
    ("replacement_cycle", "node_no_host"): ("the injection marker names no host, so the lost and the replacing node "
                                            "cannot be named"),
    ("replacement_cycle", "node_no_record"): ("no cycle record (cycle_infos/, NVRx >= 0.6) names the nodes of cycle "
                                              "{cycle}, so the lost and the replacing node cannot be named"),
    ("replacement_cycle", "node_not_host_lists"): ("the cycle records' active nodes ({was}, {now}) are not host lists, "
                                                   "so the replacing node cannot be named"),
    ("replacement_cycle", "node_still_active"): ("the lost node {lost} is still active in cycle {replacement} ({active}): "
                                                 "the node was not lost"),
    ("replacement_cycle", "node_not_active"): ("the lost node {lost} is not among the nodes of cycle {failed} ({active}): "
                                               "the fault did not hit an active node"),
    ("replacement_cycle", "node_lost_shrank"): ("; node {lost} (rank {rank}) was lost and the job shrank: cycle "
                                                "{replacement} runs on {now} alone, {n_now} of {n_was} node(s), as "
                                                "--nnodes {min}:{max} allows; {change}"),
    ("replacement_cycle", "node_job_shrank"): " (the job shrank: {change})",
    ("replacement_cycle", "node_not_replaced"): ("cycle {replacement} runs on {now}, fewer nodes than cycle {failed} "
                                                 "({was}): no standby node replaced {lost}{shrank}"),
    ("replacement_cycle", "node_replaced"): ("; node {lost} (rank {rank}) was lost and cycle {replacement} runs on "
                                             "{now}: standby {promoted} took its place"),
    ("replacement_cycle", "node_joined_again"): ("the lost node {lost} joined the rendezvous again after the failure of "
                                                 "cycle {failed}: the node was not lost"),
    ("replacement_cycle", "node_joins_fewer"): ("only {now} joined the rendezvous after the failure of cycle {failed}, "
                                                "fewer nodes than before ({was}): no standby node replaced {lost}"),
    ("replacement_cycle", "node_replaced_by_joins"): ("; node {lost} (rank {rank}'s launcher) was lost and cycle "
                                                      "{replacement} runs on {now}: standby {promoted} took its place"),
    # a recovery step stamped before its fault
    ("replacement_cycle", "stamped_early"): "{what} is stamped {at}, {gap} s before the injection at {injected}",
    ("replacement_cycle", "early_failure"): "the failure of the injected cycle",
    ("replacement_cycle", "early_first_iteration"): "the replacement's first iteration",
    ("replacement_cycle", "node_unknown"): ("The launcher restarted the workers in {replacement} after the loss of a "
                                            "node, but {nodes}."),
    ("replacement_cycle", "restarted_but"): "The launcher restarted the workers, but {problems}.",
    ("replacement_cycle", "before_the_fault"): ("The launcher restarted the workers, but {early}: a recovery cannot "
                                                "precede its fault, so the clocks or the UTC offset ({offset} s, "
                                                "{offset_how}) do not match, or the marker is not this run's."),
    ("replacement_cycle", "shrank_allowed"): "; the job shrank, as its --nnodes {min}:{max} allows: {change}",
    # harness.vocab.tiers: NVRx's in-process Wrapper
    ("replacement_cycle", "in_process"): ("NVRx's in-process Wrapper recovered the fault inside the same processes: "
                                          "{caught}it restarted {restarts} time(s) ('restart_ex: HealthCheckPassed') "
                                          "with no new launcher cycle after cycle {failed_cycle}, and the launcher "
                                          "never reported the injected worker (pid {pid}) failed: an in-process "
                                          "restart, not a launcher restart."),
    ("replacement_cycle", "inprocess_caught"): "rank {who}'s step raised ({text}), ",
    ("replacement_cycle", "inprocess_then_launcher"): (" (NVRx's in-process Wrapper did not recover it first: rank "
                                                       "{who}'s '{name}: {text}'; so this is a launcher restart, "
                                                       "with new processes)"),
    ("replacement_cycle", "restarted"): ("The launcher recorded the failure of cycle {failed_cycle}{how} and started "
                                         "replacement workers in {replacement}{nodes}{shrink}."),
    # replacement_cycle, merged over several episodes that all passed
    ("replacement_cycle", "all_restarted"): ("The launcher recorded the failures of all {faults} injected faults "
                                             "and started replacement workers after each: {each}."),
    ("replacement_cycle", "each_restarted"): ("fault {number} ({kind}, {fault_at}) failed cycle {failed_cycle}{how}, "
                                              "replaced in {replacement}"),
    # optimizer_state
    ("optimizer_state", "nothing_restored"): ("No checkpoint was restored after the fault (see optimizer_reload), so "
                                              "there is no restored optimizer state to check."),
    ("optimizer_state", "nothing_committed"): ("No checkpoint was committed after the restore of checkpoint {restored} "
                                               "(see later_checkpoint), so the restored optimizer never reached the "
                                               "disk."),
    ("optimizer_state", "no_checkpoint_dir"): ("The checkpoint directory is not with this run directory, so the "
                                               "optimizer's own record in checkpoint {first} (the first committed "
                                               "after the restore of checkpoint {restored}) cannot be read: copy "
                                               "checkpoints/ with the run to check it."),
    ("optimizer_state", "first_missing"): ("Checkpoint {first}, the first committed after the restore of checkpoint "
                                           "{restored}, is not in the checkpoint directory: copy checkpoints/ with the "
                                           "run directory to check the optimizer's own record."),
    ("optimizer_state", "unreadable"): ("The optimizer record of {rel} (the first checkpoint committed after the "
                                        "restore of checkpoint {restored}) could not be read: {why}."),
    ("optimizer_state", "no_moments"): ("{rel}, the first checkpoint committed after the restore of checkpoint "
                                        "{restored}, holds no optimizer moments at all (no optimizer key with exp_avg "
                                        "or exp_avg_sq): the training after the restore saved without optimizer "
                                        "state."),
    ("optimizer_state", "missing_moments"): ("{rel}, the first checkpoint committed after the restore of checkpoint "
                                             "{restored}, lacks exp_avg or exp_avg_sq for {missing} of {slots} "
                                             "optimizer slots ({shown}): Adam's moments were not carried through the "
                                             "restore."),
    ("optimizer_state", "no_step_counter"): ("exp_avg and exp_avg_sq are present in all {slots_text} of {rel}, but "
                                             "this checkpoint records no Adam step counter ({where}): the continuation "
                                             "is judged by loss_continuity against a baseline."),
    ("optimizer_state", "skipped_step"): ("Iteration {skipped} skipped its optimizer step, so the step count expected "
                                          "in {rel} is not its iteration {first}; see later_checkpoint."),
    ("optimizer_state", "wrong_step"): ("{rel}, the first checkpoint committed after the restore of checkpoint "
                                        "{restored}, holds Adam's step counter {got} in {key} ({field}), but an "
                                        "optimizer that continued from checkpoint {restored} has taken {first} steps at "
                                        "iteration {first}: {why}, so Adam's bias correction after the restore "
                                        "differs from an uninterrupted run's."),
    ("optimizer_state", "continued"): ("{rel}, the first checkpoint committed after the restore of checkpoint "
                                       "{restored}, holds Adam's step counter {first_g} in {key} ({field}), one step "
                                       "per iteration continued from checkpoint {restored}, and exp_avg and "
                                       "exp_avg_sq in all {slots_text}."),
    ("optimizer_state", "not_read"): "it was not read",
    ("optimizer_state", "step_not_in_common"): ("neither a common_step nor a param group step in its common state "
                                                "({common})"),
    ("optimizer_state", "step_nowhere"): "no optimizer object and no common state holding one",
    ("optimizer_state", "slots"): "{n} optimizer state slot{s} (buckets or parameters)",
    ("optimizer_state", "reset"): "it counts only the {since} steps since the restore: the step was reset to 0 when "
                                  "checkpoint {restored} was loaded",
    ("optimizer_state", "ahead"): "it ran ahead of one step per iteration since the restore",
    ("optimizer_state", "not_continued"): "it did not continue from the {restored} steps of checkpoint {restored}",
    # loss_continuity
    ("loss_continuity", "no_fault"): "Fault none: there is no restore to compare.",
    ("loss_continuity", "no_baseline"): "No baseline run given (verify --baseline RUN_DIR of an uninterrupted run).",
    ("loss_continuity", "nothing_restored"): ("No checkpoint was restored (see optimizer_reload), so there is nothing "
                                              "to compare."),
    ("loss_continuity", "final_restored"): ("Checkpoint {restored} was the final one: nothing was trained after the "
                                            "restore, so there is no loss to compare (state_equivalence compares the "
                                            "end state)."),
    ("loss_continuity", "not_logged"): ("Iterations {from}..{last} must be logged by both runs; {side} lacks "
                                        "iteration {missing} (log every iteration: --log-interval 1)."),
    ("loss_continuity", "side_ours"): "this run",
    ("loss_continuity", "side_baseline"): "the baseline {baseline}",
    ("loss_continuity", "mean_hint"): (" (or {mean}, the mean of this run's {before} and the baseline's {iteration}, "
                                       "as Megatron prints the second iteration of a start)"),
    ("loss_continuity", "differs"): ("lm loss at iteration {iteration} is {ours} after the restore of checkpoint "
                                     "{restored} but {theirs} in the uninterrupted baseline{mean}: the restored "
                                     "training state differs (optimizer state, data position or RNG)."),
    ("loss_continuity", "averaged_note"): (" (iteration {averaged}'s line is Megatron's mean of the restart's first "
                                           "two iterations, and equals the mean of this run's {before} and the "
                                           "baseline's {averaged})"),
    ("loss_continuity", "equal"): ("lm loss of iterations {first}..{end} after the restore of checkpoint {restored} "
                                   "equals the uninterrupted baseline's, all {count} of them{note}."),
    # state_equivalence: whether the workload's training is bitwise deterministic (criteria.determinism)
    ("state_equivalence", "deterministic_reference"): "the reference workload is bitwise deterministic",
    ("state_equivalence", "deterministic"): "the {workload} workload is bitwise deterministic",
    ("state_equivalence", "deterministic_cpu"): ("Megatron on CPU with hidden_dropout and attention_dropout 0 is "
                                                 "bitwise deterministic"),
    ("state_equivalence", "dropout_is"): "{name} is {value}",
    ("state_equivalence", "dropout_unseen"): ("its log does not show the dropout as 0 (Megatron's arguments tables; "
                                              "Megatron-Bridge's configuration summary, which names a dropout only "
                                              "where it differs from megatron-core's 0.1)"),
    ("state_equivalence", "not_deterministic_cpu"): "Megatron on CPU with dropout is not bitwise deterministic ({why})",
    ("state_equivalence", "workload_unrecorded"): "unrecorded (no run.json)",
    ("state_equivalence", "not_deterministic"): ("the {workload} workload is not bitwise deterministic (GPU reductions, "
                                                 "dropout)"),
}


def sentence(cid: str, reason: str, values: Mapping[str, Any]) -> str:
    """The sentence of check `cid` for `reason`, with the checker's values filled in. A value
    `problems` (a list of facts, each with its own `reason`) becomes its rendered fragments,
    joined with "; "; `restored_next` is `restored` + 1."""
    template = SENTENCES.get((cid, reason)) or SENTENCES[("*", reason)]
    filled = dict(values)
    if isinstance(filled.get("problems"), list):
        filled["problems"] = "; ".join(sentence(cid, str(p["reason"]), p) for p in filled["problems"])
    if isinstance(filled.get("ckpt"), str):  # "checkpoint", or "non-persistent checkpoint" where tiers mix
        filled["Ckpt"] = filled["ckpt"][:1].upper() + filled["ckpt"][1:]
    if isinstance(filled.get("restored"), int):
        filled["restored_next"] = filled["restored"] + 1
    return template.format_map(filled)


def said(value: Any) -> Any:
    """A value of a checker's facts in words: a Phrase rendered from the table, Joined parts
    rendered and joined, the lists, tuples and dicts holding them rendered inside; anything
    else (a number, a string, an evidence line) as it is."""
    if isinstance(value, Phrase):
        return sentence(value.cid, value.reason, {k: said(v) for k, v in value.values.items()})
    if isinstance(value, Joined):
        return value.sep.join(str(said(p)) for p in value.parts)
    if type(value) is dict:
        return {k: said(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(said(v) for v in value)
    return value


def render(result: CriterionResult) -> CriterionResult:
    """A checker's result as it is shown: its sentence (`detail`) rendered from its reason and
    facts, led by its lead phrase, and its facts' phrases in words (verdict.json's per-episode
    values). A result without a reason (read back from verdict.json, or made whole by hand)
    is returned as it is."""
    if not result.reason:
        return result
    values = said(dict(result.values))
    detail = sentence(result.id, result.reason, values)
    if result.lead is not None:
        detail = said(result.lead) + detail
    return dataclasses.replace(result, detail=detail, values=values)
