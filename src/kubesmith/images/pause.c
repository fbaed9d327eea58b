/* The pod sandbox's only process (kubesmith's pause image).
 *
 * It holds the pod's namespaces open for the pod's containers, reaps the orphans that end up
 * with it as their parent (it is PID 1 of the pod when the pod shares one PID namespace), and
 * exits at once on SIGINT or SIGTERM, so that stopping a pod never waits for a kill timeout.
 * Built static by kubesmith (`cc -static -Os`), so the image holds this one file.
 */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signal_number) {
    (void)signal_number;
    _exit(0);
}

static void reap(int signal_number) {
    (void)signal_number;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction on_stop = {.sa_handler = stop};
    struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    sigemptyset(&on_stop.sa_mask);
    sigemptyset(&on_child.sa_mask);
    if (sigaction(SIGINT, &on_stop, NULL) != 0 || sigaction(SIGTERM, &on_stop, NULL) != 0 ||
        sigaction(SIGCHLD, &on_child, NULL) != 0) {
        return 1;
    }
    for (;;) {
        pause();
    }
}
