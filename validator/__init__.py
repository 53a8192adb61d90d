"""The validator: plain code that lets only a value of the task's narrow type through."""
