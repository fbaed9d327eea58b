"""`kubesmith completion SHELL`: the completion script click generates for the shell."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print a shell completion script (bash, zsh, fish).

    \b
    bash:  kubesmith completion bash > /etc/bash_completion.d/kubesmith
    zsh:   kubesmith completion zsh > "${fpath[1]}/_kubesmith"
    fish:  kubesmith completion fish > ~/.config/fish/completions/kubesmith.fish
    """
    from kubesmith.cli import cli

    script_class = get_completion_class(shell)
    assert script_class is not None  # click ships all three
    click.echo(script_class(cli, {}, "kubesmith", "_KUBESMITH_COMPLETE").source())
