"""The red-team harness: private stacks, campaigns of emails, scoring, mail signing and the
worst-case (hostile) model. No service imports it."""
