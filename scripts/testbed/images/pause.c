/*
 * pause: the process that holds a pod sandbox's namespaces open.
 *
 * It does nothing but sleep until asked to stop. Because it is PID 1 of the
 * pod's PID namespace when namespaces are shared, it also reaps children that
 * are re-parented to it, so exited processes never linger as zombies.
 * SIGINT and SIGTERM end it with status 0 so that stopping a sandbox is clean.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_requested = 0;

static void on_stop(int signo)
{
    (void)signo;
    stop_requested = 1;
}

static void on_child(int signo)
{
    int saved_errno = errno;
    (void)signo;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved_errno;
}

static int install(int signo, void (*handler)(int))
{
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = handler;
    sigemptyset(&action.sa_mask);
    /* SA_RESTART keeps pause() semantics simple; NOCLDSTOP avoids waking on stops. */
    action.sa_flags = (signo == SIGCHLD) ? (SA_RESTART | SA_NOCLDSTOP) : 0;
    return sigaction(signo, &action, NULL);
}

int main(int argc, char **argv)
{
    int i;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) {
            printf("pause (pykubelet testbed)\n");
            return 0;
        }
    }
    if (getpid() != 1) {
        fprintf(stderr, "pause: warning: not running as PID 1\n");
    }
    if (install(SIGINT, on_stop) < 0 || install(SIGTERM, on_stop) < 0 ||
        install(SIGCHLD, on_child) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    while (!stop_requested) {
        pause();
    }
    return 0;
}
