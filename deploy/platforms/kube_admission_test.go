package platforms

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var (
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	policiesGVR    = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
	bindingsGVR    = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
)

// refusal is the start of the message of the chart's one-replica policy
// (templates/admissionpolicy.yaml).
const refusal = "uses the memory ledger"

// checkOneReplicaPolicy: with the memory ledger and admissionPolicy.enabled,
// the API server refuses more than one replica of the release's Deployment,
// whether by its scale subresource (kubectl scale) or by a patch of the
// Deployment (kubectl edit), and still lets it scale to 0 and back to 1.
// The policy takes effect a moment after helm created it: the first refusal
// is waited for, 10 s at most.
func (k *kubeCluster) checkOneReplicaPolicy(t *testing.T, r release) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := r.name + "-bulkhead"
	deployments := k.dyn.Resource(deploymentsGVR).Namespace(r.namespace)
	scale := func(n int64) error {
		s, err := deployments.Get(ctx, name, metav1.GetOptions{}, "scale")
		if err != nil {
			t.Fatalf("%s: get deployments/%s/scale: %v", r, name, err)
		}
		s.Object["spec"] = map[string]any{"replicas": n}
		_, err = deployments.Update(ctx, s, metav1.UpdateOptions{}, "scale")
		return err
	}
	var err error
	for inForce := time.Now().Add(10 * time.Second); ; {
		if err = scale(3); err != nil || time.Now().After(inForce) {
			break
		}
		// Not yet in force: back to one replica, and again.
		if err := scale(1); err != nil {
			t.Fatalf("%s: scale back to 1: %v", r, err)
		}
		time.Sleep(100 * time.Millisecond) // polling, within ctx's deadline
	}
	if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), refusal) {
		t.Fatalf("%s: scaling the Deployment to 3 replicas (kubectl scale): %v; want the one-replica policy's refusal", r, err)
	}
	t.Logf("%s: scale to 3 replicas refused by the API server: %v", r, err)

	patch := []byte(`{"spec":{"replicas":2}}`)
	_, err = deployments.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), refusal) {
		t.Errorf("%s: patching the Deployment to 2 replicas (kubectl edit): %v; want the one-replica policy's refusal", r, err)
	} else {
		t.Logf("%s: patch to 2 replicas refused by the API server: %v", r, err)
	}
	for _, n := range []int64{0, 1} {
		if err := scale(n); err != nil {
			t.Errorf("%s: scaling to %d replicas refused: %v", r, n, err)
		}
	}
}

// admissionLeftovers lists the ValidatingAdmissionPolicies and their
// bindings still on the server (cluster-scoped: leftovers does not see
// them).
func (k *kubeCluster) admissionLeftovers(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var left []string
	for _, gvr := range []schema.GroupVersionResource{policiesGVR, bindingsGVR} {
		objs, err := k.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list %s: %v", gvr.Resource, err)
		}
		for _, o := range objs.Items {
			left = append(left, fmt.Sprintf("%s %s", o.GetKind(), o.GetName()))
		}
	}
	return left
}
