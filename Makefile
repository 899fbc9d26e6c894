# Shell completions and man pages: regenerate, check, install.
# The Python package itself installs with pip (or pipx); `make install` adds what the shells and
# man(1) look for, under $(PREFIX) (below $(DESTDIR) when packaging).

PREFIX ?= /usr/local
DESTDIR ?=
PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
INSTALL ?= install

datadir ?= $(PREFIX)/share
# Where each shell looks by default: bash-completion's completions directory, zsh's
# site-functions (in $fpath), fish's vendor_completions.d.
BASH_COMPLETION_DIR ?= $(datadir)/bash-completion/completions
ZSH_COMPLETION_DIR ?= $(datadir)/zsh/site-functions
FISH_COMPLETION_DIR ?= $(datadir)/fish/vendor_completions.d
MANDIR ?= $(datadir)/man

MAN8 = $(wildcard man/*.8)
MAN5 = $(wildcard man/*.5)

.PHONY: all generate check install install-completions install-man install-relay relay uninstall

all: check

# Rewrite every generated file (protobuf stubs, completions, man pages, docs/cli.md, docs/configuration.md's
# tables, docs/development.md's Layout).
generate:
	$(PYTHON) tools/generate.py

# Fail, naming them, when generated files drift from their generators.
check:
	$(PYTHON) tools/generate.py --check

install: install-completions install-man

# cri-proxy's compiled relay (cri-relay/, a Go module): needs Go 1.26 or newer (the newest go
# scripts/build-relay finds, /usr/local/go first) and, on a machine's first build, the Go module
# proxy for grpc-go (cached per machine after that). Kept out of `install`, which needs no
# compiler; `pinctl cri-proxy` finds the relay on PATH.
bindir ?= $(PREFIX)/bin
relay:
	scripts/build-relay build/pinctl-cri-relay

install-relay: relay
	$(INSTALL) -d $(DESTDIR)$(bindir)
	$(INSTALL) -m 755 build/pinctl-cri-relay $(DESTDIR)$(bindir)/pinctl-cri-relay

install-completions:
	$(INSTALL) -d $(DESTDIR)$(BASH_COMPLETION_DIR) $(DESTDIR)$(ZSH_COMPLETION_DIR) $(DESTDIR)$(FISH_COMPLETION_DIR)
	$(INSTALL) -m 644 completions/bash/pinctl $(DESTDIR)$(BASH_COMPLETION_DIR)/pinctl
	$(INSTALL) -m 644 completions/zsh/_pinctl $(DESTDIR)$(ZSH_COMPLETION_DIR)/_pinctl
	$(INSTALL) -m 644 completions/fish/pinctl.fish $(DESTDIR)$(FISH_COMPLETION_DIR)/pinctl.fish

install-man:
	$(INSTALL) -d $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(MANDIR)/man5
	$(INSTALL) -m 644 $(MAN8) $(DESTDIR)$(MANDIR)/man8/
	$(INSTALL) -m 644 $(MAN5) $(DESTDIR)$(MANDIR)/man5/

uninstall:
	rm -f $(DESTDIR)$(bindir)/pinctl-cri-relay
	rm -f $(DESTDIR)$(BASH_COMPLETION_DIR)/pinctl $(DESTDIR)$(ZSH_COMPLETION_DIR)/_pinctl \
		$(DESTDIR)$(FISH_COMPLETION_DIR)/pinctl.fish
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man8/,$(notdir $(MAN8))) \
		$(addprefix $(DESTDIR)$(MANDIR)/man5/,$(notdir $(MAN5)))
