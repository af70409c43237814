package platforms

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	clientnetworkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	clientsecurityv1 "istio.io/client-go/pkg/apis/security/v1"
	clienttelemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/yaml"
)

// istioKind is an Istio kind the chart renders or the docs show: its
// apiVersion, and a new object of its istio.io/client-go type with a
// pointer to that object's spec, an istio.io/api message.
type istioKind struct {
	apiVersion string
	new        func() (runtime.Object, proto.Message)
}

var istioKinds = map[string]istioKind{
	"AuthorizationPolicy": {"security.istio.io/v1", func() (runtime.Object, proto.Message) {
		o := &clientsecurityv1.AuthorizationPolicy{}
		return o, &o.Spec
	}},
	"EnvoyFilter": {"networking.istio.io/v1alpha3", func() (runtime.Object, proto.Message) {
		o := &clientnetworkingv1alpha3.EnvoyFilter{}
		return o, &o.Spec
	}},
	"Telemetry": {"telemetry.istio.io/v1", func() (runtime.Object, proto.Message) {
		o := &clienttelemetryv1.Telemetry{}
		return o, &o.Spec
	}},
}

// errIstio is wrapped by every error of istioDecoder and decodeMeshConfig.
var errIstio = errors.New("not a valid Istio resource")

// istioDecoder decodes Istio objects strictly, twice:
//   - the whole object into its istio.io/client-go type, with Kubernetes'
//     strict decoder: an unknown or duplicate field in the object or its
//     metadata is an error;
//   - its spec into the istio.io/api message with protojson, which refuses
//     unknown fields, unknown enum values and wrong types. The client-go
//     types decode their spec with istio.io/api's own JSON unmarshalers,
//     which allow unknown fields (jsonpb AllowUnknownFields: true): a
//     misspelt spec field would pass the first decoding unseen.
//
// The two decodings must agree.
type istioDecoder struct{ codec runtime.Decoder }

func newIstioDecoder(t testing.TB) istioDecoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientnetworkingv1alpha3.AddToScheme, clientsecurityv1.AddToScheme, clienttelemetryv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return istioDecoder{kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})}
}

// decode returns the client-go object of an Istio resource in YAML.
func (d istioDecoder) decode(raw []byte) (runtime.Object, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%w: %w", errIstio, err)
	}
	kind, ok := istioKinds[head.Kind]
	if !ok {
		return nil, fmt.Errorf("%w: kind %q is not one this test knows", errIstio, head.Kind)
	}
	if head.APIVersion != kind.apiVersion {
		return nil, fmt.Errorf("%w: %s apiVersion %q, want %q", errIstio, head.Kind, head.APIVersion, kind.apiVersion)
	}
	obj, spec := kind.new()
	// The spec first: protojson's errors name the field.
	var doc struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: %w", errIstio, err)
	}
	if doc.Spec == nil {
		return nil, fmt.Errorf("%w: %s without a spec", errIstio, head.Kind)
	}
	strict := spec.ProtoReflect().New().Interface()
	if err := protojson.Unmarshal(doc.Spec, strict); err != nil {
		return nil, fmt.Errorf("%w: %s spec (istio.io/api %s): %w", errIstio, head.Kind, strict.ProtoReflect().Descriptor().FullName(), err)
	}
	if _, _, err := d.codec.Decode(raw, nil, obj); err != nil {
		return nil, fmt.Errorf("%w: %s (istio.io/client-go %T): %w", errIstio, head.Kind, obj, err)
	}
	if !proto.Equal(strict, spec) {
		return nil, fmt.Errorf("%w: %s spec: istio.io/client-go decoded\n  %v\nprotojson decoded\n  %v", errIstio, head.Kind, spec, strict)
	}
	return obj, nil
}

// decodeMeshConfig decodes the mesh config snippet users add to istiod's
// (a document whose only key is meshConfig) into istio.io/api's
// MeshConfig, strictly.
func decodeMeshConfig(raw []byte) (*meshv1alpha1.MeshConfig, error) {
	// A map, not a struct: encoding/json matches struct fields without
	// regard to case, and would take "meshconfig" for meshConfig.
	var doc map[string]json.RawMessage
	if err := yaml.UnmarshalStrict(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: mesh config snippet: %w", errIstio, err)
	}
	for key := range doc {
		if key != "meshConfig" {
			return nil, fmt.Errorf("%w: mesh config snippet: unknown field %q (only meshConfig)", errIstio, key)
		}
	}
	if doc["meshConfig"] == nil {
		return nil, fmt.Errorf("%w: mesh config snippet without meshConfig", errIstio)
	}
	mc := &meshv1alpha1.MeshConfig{}
	if err := protojson.Unmarshal(doc["meshConfig"], mc); err != nil {
		return nil, fmt.Errorf("%w: meshConfig (istio.io/api istio.mesh.v1alpha1.MeshConfig): %w", errIstio, err)
	}
	return mc, nil
}

// decodeConfigPatches decodes a YAML list of EnvoyFilter configPatches.
func decodeConfigPatches(raw []byte) ([]*networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectPatch, error) {
	var items []json.RawMessage
	if err := yaml.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("%w: configPatches: %w", errIstio, err)
	}
	var patches []*networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectPatch
	for i, item := range items {
		p := &networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectPatch{}
		if err := protojson.Unmarshal(item, p); err != nil {
			return nil, fmt.Errorf("%w: configPatches[%d]: %w", errIstio, i, err)
		}
		patches = append(patches, p)
	}
	return patches, nil
}

// Every Istio object the chart renders decodes strictly with Istio's own
// types, and so does the mesh config it renders for istiod; every provider
// the AuthorizationPolicies and Telemetry resources name is in that mesh
// config, of the right type.
func TestChartIstioObjectsDecodeStrictly(t *testing.T) {
	d := newIstioDecoder(t)
	seen := map[string]int{}
	for _, values := range []string{"istio-values.yaml", "istio-telemetry-values.yaml"} {
		t.Run(values, func(t *testing.T) {
			var mesh *meshv1alpha1.MeshConfig
			var objs []runtime.Object
			for _, m := range render(t, valuesFile(t, values)) {
				switch {
				case m.Kind == "ConfigMap" && m.Name == "rel-bulkhead-istio":
					var cm struct {
						Data map[string]string `json:"data"`
					}
					if err := yaml.Unmarshal(m.Raw, &cm); err != nil {
						t.Fatalf("%s: %v", m, err)
					}
					mc, err := decodeMeshConfig([]byte(cm.Data["meshconfig.yaml"]))
					if err != nil {
						t.Errorf("%s: data meshconfig.yaml: %v", m, err)
						continue
					}
					mesh = mc
				case strings.Contains(m.APIVersion, "istio.io/"):
					obj, err := d.decode(m.Raw)
					if err != nil {
						t.Errorf("%s: %v", m, err)
						continue
					}
					seen[m.Kind]++
					objs = append(objs, obj)
				}
			}
			if mesh == nil {
				t.Fatal("no mesh config rendered (ConfigMap rel-bulkhead-istio)")
			}
			for _, p := range namedProviders(objs) {
				if err := checkProvider(mesh, p); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for kind := range istioKinds {
		if seen[kind] == 0 {
			t.Errorf("no %s rendered by the Istio values files: the test checks nothing for it", kind)
		}
	}
}

// provider is an extension provider an Istio object names, and the kind
// of provider it must be.
type provider struct {
	by, name, want string
}

func namedProviders(objs []runtime.Object) []provider {
	var ps []provider
	for _, o := range objs {
		switch o := o.(type) {
		case *clientsecurityv1.AuthorizationPolicy:
			ps = append(ps, provider{"AuthorizationPolicy " + o.Name, o.Spec.GetProvider().GetName(), "envoyExtAuthzGrpc"})
		case *clienttelemetryv1.Telemetry:
			for _, al := range o.Spec.GetAccessLogging() {
				for _, p := range al.GetProviders() {
					ps = append(ps, provider{"Telemetry " + o.Name, p.GetName(), "envoyHttpAls"})
				}
			}
		}
	}
	return ps
}

func checkProvider(mesh *meshv1alpha1.MeshConfig, p provider) error {
	for _, ep := range mesh.GetExtensionProviders() {
		if ep.GetName() != p.name {
			continue
		}
		switch {
		case p.want == "envoyExtAuthzGrpc" && ep.GetEnvoyExtAuthzGrpc() != nil,
			p.want == "envoyHttpAls" && ep.GetEnvoyHttpAls() != nil:
			return nil
		}
		return fmt.Errorf("%s names provider %q, which is not an %s provider in the mesh config", p.by, p.name, p.want)
	}
	return fmt.Errorf("%s names provider %q, which the mesh config the chart renders does not define", p.by, p.name)
}

// yamlBlockRE matches a fenced YAML block of a Markdown file, indented or
// not (blocks inside list items are).
var yamlBlockRE = regexp.MustCompile("(?ms)^([ \t]*)```yaml\n(.*?)^[ \t]*```")

// Every YAML block of docs/istio.md is an Istio object, a mesh config
// snippet or a list of EnvoyFilter patches, and decodes strictly.
func TestDocsIstioSnippetsDecodeStrictly(t *testing.T) {
	const doc = "docs/istio.md"
	d := newIstioDecoder(t)
	blocks := yamlBlockRE.FindAllStringSubmatch(string(readRepoFile(t, doc)), -1)
	if len(blocks) < 5 {
		t.Fatalf("%s: only %d YAML blocks", doc, len(blocks))
	}
	for i, b := range blocks {
		raw := []byte(dedent(b[2], b[1]))
		where := fmt.Sprintf("%s, YAML block %d", doc, i+1)
		var err error
		switch first := firstKey(raw); first {
		case "meshConfig":
			_, err = decodeMeshConfig(raw)
		case "apiVersion", "kind":
			_, err = d.decode(raw)
		case "- applyTo":
			_, err = decodeConfigPatches(raw)
		default:
			err = fmt.Errorf("starts with %q: not an Istio object, a mesh config or a list of EnvoyFilter patches (teach this test)", first)
		}
		if err != nil {
			t.Errorf("%s: %v\n%s", where, err, raw)
		}
	}
}

// dedent removes the fence's indentation from each line of a block.
func dedent(block, indent string) string {
	if indent == "" {
		return block
	}
	lines := strings.Split(block, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, indent)
	}
	return strings.Join(lines, "\n")
}

// firstKey is the first key of a YAML document ("- key" for a list).
func firstKey(raw []byte) string {
	for _, line := range strings.Split(string(raw), "\n") {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		key, _, _ := strings.Cut(line, ":")
		return key
	}
	return ""
}

// The decoding is strict: each mistake below is refused. The first case
// also shows why the spec is decoded a second time: client-go's types
// alone accept it.
func TestIstioDecodingIsStrict(t *testing.T) {
	d := newIstioDecoder(t)
	const envoyFilter = `apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: x, namespace: shop}
spec:
  workloadSelector: {labels: {app: x}}
  configPatches:
  - applyTo: HTTP_ROUTE
    match: {context: SIDECAR_INBOUND}
    patch: {operation: MERGE, value: {}}
`
	if _, err := d.decode([]byte(envoyFilter)); err != nil {
		t.Fatalf("the valid EnvoyFilter: %v", err)
	}
	misspelt := strings.Replace(envoyFilter, "workloadSelector", "workloadSelectr", 1)
	if _, _, err := d.codec.Decode([]byte(misspelt), nil, &clientnetworkingv1alpha3.EnvoyFilter{}); err != nil {
		t.Errorf("client-go's strict decoding alone now refuses a misspelt spec field (%v): the protojson pass may be redundant", err)
	}
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"misspelt spec field", misspelt, `unknown field "workloadSelectr"`},
		{"misspelt nested field", strings.Replace(envoyFilter, "{context:", "{contxt:", 1), `unknown field "contxt"`},
		{"unknown enum value", strings.Replace(envoyFilter, "HTTP_ROUTE", "HTTP_ROUT", 1), `HTTP_ROUT`},
		{"wrong type", strings.Replace(envoyFilter, "spec:\n", "spec:\n  priority: high\n", 1), `invalid value for int32 field priority: "high"`},
		{"misspelt metadata field", strings.Replace(envoyFilter, "namespace: shop", "nmespace: shop", 1), `unknown field "metadata.nmespace"`},
		{"duplicate field", strings.Replace(envoyFilter, "metadata: {name: x,", "metadata: {name: x, name: z,", 1), `key "name" already set in map`},
		{"unknown top-level field", envoyFilter + "specs: {}\n", `unknown field "specs"`},
		{"other apiVersion", strings.Replace(envoyFilter, "v1alpha3", "v1beta1", 1), `apiVersion "networking.istio.io/v1beta1"`},
		{"Telemetry provider misspelt", `apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: x}
spec: {accessLogging: [{provider: {name: als}}]}
`, `unknown field "provider"`},
		{"AuthorizationPolicy bad action", `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: x}
spec: {action: CUSTOMER, provider: {name: authz}, rules: [{}]}
`, `CUSTOMER`},
		{"unknown kind", "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: x}\nspec: {}\n", `kind "Sidecar"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.decode([]byte(tc.yaml))
			if err == nil || !errors.Is(err, errIstio) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"misspelt provider field", "meshConfig:\n  extensionProviders:\n  - name: a\n    envoyExtAuthzGrpc: {service: s, port: 1, timout: 1s}\n", `unknown field "timout"`},
		{"bad duration", "meshConfig:\n  extensionProviders:\n  - name: a\n    envoyExtAuthzGrpc: {service: s, port: 1, timeout: 1 second}\n", `invalid google.protobuf.Duration value "1 second"`},
		{"misspelt top-level key", "meshconfig:\n  extensionProviders: []\n", `unknown field "meshconfig"`},
	} {
		t.Run("mesh config "+tc.name, func(t *testing.T) {
			_, err := decodeMeshConfig([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := decodeConfigPatches([]byte("- applyTo: NETWORK_FILTER\n  match: {context: SIDECAR_INBOUND}\n  patch: {operation: MERGE}\n  prority: 1\n")); err == nil || !strings.Contains(err.Error(), `unknown field "prority"`) {
		t.Errorf("configPatches with a misspelt field: error %v", err)
	}
}
