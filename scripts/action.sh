#!/usr/bin/env bash
# scripts/action.sh: the body of karpctl's GitHub Action (action.yml at the repo root).
#
#   1. installs the release archive for this runner (karpctl-<v>-<target>.tar.gz, the names
#      .github/workflows/release.yml makes: static musl builds on Linux), downloaded with
#      `gh release download` (private repositories too) and checked against its .sha256, into a
#      temp dir that is added to GITHUB_PATH;
#   2. runs `karpctl diff --output markdown ARGS` (or `karpctl up ARGS`) in the working
#      directory. Exit 2 of diff (changes) is a result, not a failure;
#   3. on a pull request, posts the Markdown as ONE comment, found again on the next run by a
#      hidden marker at its start (`<!-- karpctl-diff -->`, or `<!-- karpctl-diff:TAG -->`) and
#      updated in place (`gh api`). A failed run updates it too, so it never shows a stale diff;
#   4. sets the step outputs exit-code, changes, markdown-file and comment-url, then fails the
#      step when karpctl failed (or found changes with fail-on-changes).
#
# Every input arrives as an environment variable (action.yml never splices `${{ }}` into the
# script): INPUT_VERSION, INPUT_COMMAND, INPUT_ARGS, INPUT_COMMENT, INPUT_COMMENT_TAG,
# INPUT_FAIL_ON_CHANGES, INPUT_WORKING_DIRECTORY, INPUT_PR_NUMBER, INPUT_REPOSITORY,
# INPUT_GITHUB_TOKEN, plus ACTION_REPOSITORY, ACTION_REF, ACTION_PATH (github.action_*) and
# PR_HEAD_SHA. Runs on the bash 3.2 of macOS too: no mapfile, no ${x,,}, empty arrays expanded
# with ${a[@]+...}.
set -euo pipefail

# --- messages ----------------------------------------------------------------------------------

# Workflow-command data escaping (%, CR, LF), so a message cannot break out of its annotation.
escape_data() {
    local s=$1
    s=${s//'%'/'%25'}
    s=${s//$'\r'/'%0D'}
    s=${s//$'\n'/'%0A'}
    printf '%s' "$s"
}
say() { printf 'karpctl-action: %s\n' "$*" >&2; }
warn() { printf '::warning title=karpctl::%s\n' "$(escape_data "$*")" >&2; }
error() { printf '::error title=karpctl::%s\n' "$(escape_data "$*")" >&2; }
die() {
    error "$*"
    exit 1
}

# --- small helpers -----------------------------------------------------------------------------

lower() { printf '%s' "$1" | tr '[:upper:]' '[:lower:]'; }

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | awk '{print $1}'
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 "$1" | awk '{print $1}'
    else
        die "neither sha256sum nor shasum is installed: cannot check the download"
    fi
}

# A token for ::stop-commands::, so nothing karpctl prints (names and tags come from plan files
# in the pull request) is read as a workflow command.
random_token() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }

# gh with the action's token, and only gh: karpctl itself never sees the token.
gh_api() {
    command -v gh >/dev/null 2>&1 || die "the GitHub CLI (gh) is not installed on this runner; it is needed for version: latest and for the pull-request comment"
    GH_TOKEN=$GITHUB_API_TOKEN GH_ENTERPRISE_TOKEN=$GITHUB_API_TOKEN gh api "$@"
}

# --- inputs ------------------------------------------------------------------------------------

# The token lives in a shell variable from here on, not in the environment karpctl inherits.
GITHUB_API_TOKEN=${INPUT_GITHUB_TOKEN:-}
unset INPUT_GITHUB_TOKEN GH_TOKEN GITHUB_TOKEN 2>/dev/null || true

server_url=${GITHUB_SERVER_URL:-https://github.com}
if [[ "$server_url" != "https://github.com" ]]; then
    export GH_HOST=${server_url#*://}   # GitHub Enterprise Server: gh talks to this host
fi

command_=${INPUT_COMMAND:-diff}
case "$command_" in
    diff | up) ;;
    *) die "command must be diff or up, not '$command_'" ;;
esac

fail_on_changes=$(lower "${INPUT_FAIL_ON_CHANGES:-false}")
case "$fail_on_changes" in
    true | false) ;;
    *) die "fail-on-changes must be true or false, not '${INPUT_FAIL_ON_CHANGES:-}'" ;;
esac

pr_number=${INPUT_PR_NUMBER:-}
if [[ -n "$pr_number" && ! "$pr_number" =~ ^[1-9][0-9]*$ ]]; then
    die "pull-request-number must be a number, not '$pr_number'"
fi

# comment: auto (the default) = on a pull request; true; false.
want_comment=false
comment_input=$(lower "${INPUT_COMMENT:-auto}")
case "$comment_input" in
    auto | "")
        if [[ -n "$pr_number" ]]; then want_comment=true; fi
        ;;
    true)
        if [[ -n "$pr_number" ]]; then
            want_comment=true
        else
            warn "comment: true, but this ${GITHUB_EVENT_NAME:-} event has no pull request; set pull-request-number to comment on one"
        fi
        ;;
    false) ;;
    *) die "comment must be true, false or auto, not '${INPUT_COMMENT:-}'" ;;
esac
if [[ "$command_" != diff && "$want_comment" == true ]]; then
    if [[ "$comment_input" == true ]]; then say "command: $command_ posts no comment (only diff does)"; fi
    want_comment=false
fi

comment_tag=${INPUT_COMMENT_TAG:-}
if [[ -n "$comment_tag" && ! "$comment_tag" =~ ^[A-Za-z0-9._-]{1,100}$ ]]; then
    die "comment-tag may hold only letters, digits, '.', '_' and '-' (at most 100), not '$comment_tag'"
fi
if [[ -n "$comment_tag" ]]; then
    marker="<!-- karpctl-diff:$comment_tag -->"
else
    marker="<!-- karpctl-diff -->"
fi

# Extra arguments: split as a shell would split words and quotes, without running anything
# (xargs parses '...', "..." and backslashes; no expansion, no substitution). A word cannot
# hold a newline (xargs refuses one inside quotes), so one word a line is exact.
extra_args=()
parse_args() {
    local file=$1 a args=${INPUT_ARGS:-}
    if [[ -z "${args//[[:space:]]/}" ]]; then
        return 0
    fi
    printf '%s\n' "$args" | xargs printf '%s\n' >"$file" ||
        die "args could not be split into words (an unmatched quote?): $args"
    while IFS= read -r a; do
        extra_args+=("$a")
    done <"$file"
}

# --- which release ------------------------------------------------------------------------------

# The action's own repository and ref. github.action_repository / action_ref can be empty inside
# a composite action (actions/runner#2473), so the checkout path the runner gives the action,
# .../_actions/<owner>/<repo>/<ref>, is read next; `uses: ./` (this repository) comes last.
action_repo=${ACTION_REPOSITORY:-}
action_ref=${ACTION_REF:-}
path_repo=""
path_ref=""
case "${ACTION_PATH:-}" in
    */_actions/*/*/*)
        rest=${ACTION_PATH#*/_actions/}
        owner=${rest%%/*}
        rest=${rest#*/}
        path_repo="$owner/${rest%%/*}"
        path_ref=${rest#*/}
        ;;
esac
[[ -n "$action_repo" ]] || action_repo=$path_repo
[[ -n "$action_repo" ]] || action_repo=${GITHUB_REPOSITORY:-}
[[ -n "$action_ref" ]] || action_ref=$path_ref
# The repository input (a fork, a mirror, a copy of the action kept in another repository) wins.
release_repo=${INPUT_REPOSITORY:-$action_repo}
[[ -n "$release_repo" ]] || die "cannot tell which repository to download karpctl from: set the repository input"
[[ "$release_repo" =~ ^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$ ]] || die "repository must be OWNER/NAME, not '$release_repo'"

semver_tag='^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]*)?$'
resolve_version() {
    local v=${INPUT_VERSION:-}
    if [[ -z "$v" ]]; then
        # `uses: OWNER/karpctl@v0.1.0` runs karpctl v0.1.0; a branch, a SHA or `uses: ./` the newest release.
        if [[ "$action_ref" =~ $semver_tag ]]; then v=$action_ref; else v=latest; fi
    fi
    if [[ "$v" == latest ]]; then
        v=$(gh_api "repos/$release_repo/releases/latest" --jq .tag_name) ||
            die "could not find the latest release of $release_repo (set the version input to a release tag)"
    fi
    [[ "$v" =~ ^[A-Za-z0-9._+-]+$ ]] || die "version must be a release tag such as v0.1.0, not '$v'"
    printf '%s' "$v"
}

# RUNNER_OS / RUNNER_ARCH -> the targets release.yml builds for this runner, best first: the
# Linux archives are static (musl) and run on any distribution; releases before them had glibc
# (gnu) builds only.
release_targets() {
    local os=${RUNNER_OS:-$(uname -s)} arch=${RUNNER_ARCH:-$(uname -m)}
    case "$os/$arch" in
        Linux/X64 | Linux/x86_64) echo "x86_64-unknown-linux-musl x86_64-unknown-linux-gnu" ;;
        Linux/ARM64 | Linux/aarch64 | Linux/arm64) echo "aarch64-unknown-linux-musl aarch64-unknown-linux-gnu" ;;
        macOS/X64 | Darwin/x86_64) echo x86_64-apple-darwin ;;
        macOS/ARM64 | Darwin/arm64) echo aarch64-apple-darwin ;;
        *) die "no karpctl release archive for $os/$arch (releases: Linux and macOS on x86_64 and arm64); run the container image instead" ;;
    esac
}

have_gh() { command -v gh >/dev/null 2>&1; }

# The asset names of release VERSION, one a line (gh: works for private repositories too).
release_assets() { # VERSION
    if have_gh; then
        GH_TOKEN=$GITHUB_API_TOKEN GH_ENTERPRISE_TOKEN=$GITHUB_API_TOKEN \
            gh release view "$1" --repo "$release_repo" --json assets --jq '.assets[].name'
    fi
}

# The first of the runner's targets the release has an archive for.
pick_target() { # VERSION
    local v=$1 assets t
    assets=$(release_assets "$v") || die "could not list the assets of release $v of $release_repo (is the tag right, and may github-token read the repository?)"
    for t in $(release_targets); do
        if [[ -z "$assets" ]] || printf '%s\n' "$assets" | grep -qxF "karpctl-$v-$t.tar.gz"; then
            echo "$t"
            return 0
        fi
    done
    die "release $v of $release_repo has no archive for this runner (looked for: $(release_targets))"
}

# Fetch ASSET of release VERSION into DIR: `gh release download` with the action's token, so a
# private repository works; without gh, a plain download (public repositories only).
download() { # VERSION ASSET DIR
    local v=$1 asset=$2 dir=$3
    if have_gh; then
        GH_TOKEN=$GITHUB_API_TOKEN GH_ENTERPRISE_TOKEN=$GITHUB_API_TOKEN \
            gh release download "$v" --repo "$release_repo" --pattern "$asset" --dir "$dir" --clobber ||
            die "download failed: $asset of release $v of $release_repo"
    else
        local url="$server_url/$release_repo/releases/download/$v/$asset"
        curl --fail --silent --show-error --location --retry 3 --retry-delay 2 --output "$dir/$asset" "$url" ||
            die "download failed: $url (without the GitHub CLI only public repositories can be downloaded from)"
    fi
}

install_karpctl() { # VERSION TARGET DIR -> prints the binary's path
    local v=$1 t=$2 dir=$3
    local name="karpctl-$v-$t"
    say "downloading $name.tar.gz from release $v of $release_repo"
    download "$v" "$name.tar.gz" "$dir"
    download "$v" "$name.tar.gz.sha256" "$dir"
    local want got
    want=$(lower "$(awk 'NR == 1 {print $1}' "$dir/$name.tar.gz.sha256")")
    [[ "$want" =~ ^[0-9a-f]{64}$ ]] || die "$name.tar.gz.sha256 holds no SHA-256"
    got=$(sha256_of "$dir/$name.tar.gz")
    [[ "$got" == "$want" ]] || die "SHA-256 mismatch for $name.tar.gz: expected $want, got $got"
    say "SHA-256 OK ($got)"
    tar -xzf "$dir/$name.tar.gz" -C "$dir"
    [[ -f "$dir/$name/karpctl" ]] || die "$name.tar.gz holds no $name/karpctl"
    mkdir -p "$dir/bin"
    mv "$dir/$name/karpctl" "$dir/bin/karpctl"
    chmod 0755 "$dir/bin/karpctl"
    rm -rf "${dir:?}/$name" "$dir/$name.tar.gz" "$dir/$name.tar.gz.sha256"
    printf '%s' "$dir/bin/karpctl"
}

# --- the pull-request comment --------------------------------------------------------------------

repo=${GITHUB_REPOSITORY:-}

# The id of the first comment on the pull request whose body starts with the marker (every page).
find_comment() {
    local pages
    pages=$(gh_api --paginate "repos/$repo/issues/$pr_number/comments?per_page=100") || return 1
    printf '%s' "$pages" | jq -r --arg m "$marker" '.[] | select((.body // "") | startswith($m)) | .id' | awk 'NF {print; exit}'
}

# Posts BODY_FILE as the comment (PATCH the one found, else POST); prints the comment's URL.
# A comment that cannot be updated is not replaced by a new one: that would add one per run.
post_comment() {
    local body=$1 payload id
    payload="$body.json"
    jq -Rs '{body: .}' <"$body" >"$payload" || return 1
    id=$(find_comment) || return 1
    if [[ -n "$id" ]]; then
        gh_api --method PATCH "repos/$repo/issues/comments/$id" --input "$payload" --jq .html_url
    else
        gh_api --method POST "repos/$repo/issues/$pr_number/comments" --input "$payload" --jq .html_url
    fi
}

html_escape() { sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g'; }

# The comment body: the marker, karpctl's Markdown (or, when it printed none, the end of its
# error output), and a footer naming the version, the commit and the run.
compose_body() { # MARKDOWN_FILE STDERR_FILE CODE VERSION OUT
    local md=$1 err=$2 code=$3 v=$4 out=$5
    local run_url="$server_url/$repo/actions/runs/${GITHUB_RUN_ID:-}"
    local sha=${PR_HEAD_SHA:-${GITHUB_SHA:-}}
    {
        printf '%s\n' "$marker"
        if [[ -s "$md" ]]; then
            cat "$md"
        else
            printf '### karpctl diff\n\n**karpctl diff failed (exit %s) before it printed a diff.** The end of its output:\n\n<pre>\n' "$code"
            tail -n 40 "$err" | head -c 12000 | html_escape
            printf '</pre>\n'
        fi
        printf '\n<sub>karpctl %s' "$v"
        if [[ -n "$sha" ]]; then printf ' · commit %s' "${sha:0:7}"; fi
        if [[ -n "${GITHUB_RUN_ID:-}" ]]; then printf ' · [workflow run](%s)' "$run_url"; fi
        printf '</sub>\n'
    } >"$out"
}

set_output() { # NAME VALUE
    if [[ -n "${GITHUB_OUTPUT:-}" ]]; then
        printf '%s=%s\n' "$1" "$2" >>"$GITHUB_OUTPUT"
    else
        say "output $1=$2"
    fi
}

# --- main ----------------------------------------------------------------------------------------

main() {
    local work version target bin
    work=$(mktemp -d "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/karpctl-action.XXXXXX")
    parse_args "$work/args"

    version=$(resolve_version)
    target=$(pick_target "$version")
    bin=$(install_karpctl "$version" "$target" "$work")
    if [[ -n "${GITHUB_PATH:-}" ]]; then
        printf '%s\n' "$(dirname "$bin")" >>"$GITHUB_PATH"
    fi
    say "$("$bin" --version) ($target), on PATH for the rest of the job"

    cd "${INPUT_WORKING_DIRECTORY:-.}" || die "working-directory '${INPUT_WORKING_DIRECTORY:-}' does not exist"

    local md="$work/karpctl-$command_.md" err="$work/karpctl-$command_.stderr" code token
    : >"$md"
    : >"$err"
    token=$(random_token)
    echo "::stop-commands::$token"
    say "running: karpctl $command_${INPUT_ARGS:+ $INPUT_ARGS}"
    set +e
    if [[ "$command_" == diff ]]; then
        # stdout (the Markdown) to the file, stderr (progress, errors) to the log and a copy.
        "$bin" diff --output markdown ${extra_args[@]+"${extra_args[@]}"} 2>&1 >"$md" | tee "$err" >&2
        code=${PIPESTATUS[0]}
    else
        "$bin" "$command_" ${extra_args[@]+"${extra_args[@]}"}
        code=$?
    fi
    set -e
    echo "::$token::"
    say "karpctl $command_ exited $code"
    if [[ "$command_" == diff && -s "$md" ]]; then
        echo "::group::karpctl diff (Markdown)"
        token=$(random_token)
        echo "::stop-commands::$token"
        cat "$md"
        echo "::$token::"
        echo "::endgroup::"
    fi

    local changes=false
    if [[ "$command_" == diff && "$code" == 2 ]]; then changes=true; fi
    set_output exit-code "$code"
    set_output changes "$changes"
    if [[ "$command_" == diff ]]; then
        set_output markdown-file "$md"
    else
        set_output markdown-file ""
    fi

    if [[ "$command_" == diff && -s "$md" && -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
        cat "$md" >>"$GITHUB_STEP_SUMMARY"
    fi

    local url=""
    if [[ "$want_comment" == true ]]; then
        if [[ -s "$md" || "$code" != 0 && "$code" != 2 ]]; then
            command -v jq >/dev/null 2>&1 || die "jq is not installed on this runner; it is needed for the pull-request comment"
            compose_body "$md" "$err" "$code" "$version" "$work/comment.md"
            if url=$(post_comment "$work/comment.md"); then
                say "comment: $url"
            else
                url=""
                warn "could not post the pull-request comment; the job needs 'permissions: pull-requests: write' (a pull request from a fork gets a read-only token)"
            fi
        else
            warn "karpctl diff printed nothing; no comment posted"
        fi
    fi
    set_output comment-url "$url"

    case "$code" in
        0) ;;
        2)
            if [[ "$command_" != diff ]]; then
                die "karpctl $command_ exited 2"
            elif [[ "$fail_on_changes" == true ]]; then
                die "karpctl diff found changes (fail-on-changes: true)"
            fi
            ;;
        *) die "karpctl $command_ failed (exit $code)" ;;
    esac
}

main "$@"
