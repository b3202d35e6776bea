#!/usr/bin/env bash
# The command the GitHub Action (action.yml) runs to gate a merge on a delta_eval run, kept in a file so that a
# test runs exactly what the action runs. Its exit status is delta-eval's: 0 approved (or below --fail-on),
# 3 REJECTED, 4 PARTIAL with fail-on partial, 5 a run that gave no decision, 1 a run that could not start.
#
# Inputs come as environment variables (the action sets them from its inputs, never by pasting them into the
# script, so an input cannot inject shell code): DELTA_EVAL_CONFIG (required), DELTA_EVAL_FAIL_ON (rejected),
# DELTA_EVAL_JUNIT (delta-eval-junit.xml). The Markdown summary goes to $GITHUB_STEP_SUMMARY.
set -euo pipefail

: "${DELTA_EVAL_CONFIG:?set the config input of the action: a TOML or YAML run configuration}"
args=(run "$DELTA_EVAL_CONFIG" --no-progress --fail-on "${DELTA_EVAL_FAIL_ON:-rejected}"
      --junit "${DELTA_EVAL_JUNIT:-delta-eval-junit.xml}")
if [[ -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
  args+=(--summary "$GITHUB_STEP_SUMMARY")
fi
exec delta-eval "${args[@]}"
